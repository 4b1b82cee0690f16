"""Engines behind the Engine protocol: HFEngine (embedded torch), VLLMEngine, RemoteEngine, and the embedding model."""
