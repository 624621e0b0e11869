"""Model: encoders, heads, freezing and adaptation strategies, metrics, the LightningModule."""
