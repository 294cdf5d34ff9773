from gpuledger.services.cli.entry import main

main()
