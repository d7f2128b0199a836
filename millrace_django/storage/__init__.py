"""Storage providers. Each implements the contract and imports nothing above it."""
