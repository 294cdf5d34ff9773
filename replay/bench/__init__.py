"""The benchmark harnesses behind `gpuledger bench ...`, in one package outside the projection layer.

`info` (what every bench JSON carries: machine, moment, baseline pairing), `fleet` (placement at
fleet scale), `replay` (what-if replay of the openb trace), `projector` (the projector's rate and
the synthetic log other tests reuse), `restart` (each service's time to ready), `latency` (live
end-to-end placement latency) and `cli` (command-line start-up). They may import any layer; no
core or projection module imports them."""
