"""The live asyncio shell: embedded nats-server, JetStream bus, the generic host loop,
leader leases and logging set-up. Every service runs under `host.run_service`."""
