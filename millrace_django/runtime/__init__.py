"""L2, the runtime: worker pool, scheduler, wake-ups, shutdown. Receives a provider."""
