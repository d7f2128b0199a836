"""The sample app: one job of every shape, and commands to enqueue them and show them."""
