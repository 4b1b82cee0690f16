"""Loading models: specs, GGUF files, the offline tiny model, fingerprints, weight-free facts, numerics, prompt formats."""
