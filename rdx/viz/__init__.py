"""Pictures of explanations."""
