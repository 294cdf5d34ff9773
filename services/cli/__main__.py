from gpuledger.services.cli.main import app

app()
