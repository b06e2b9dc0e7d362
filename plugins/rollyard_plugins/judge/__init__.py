"""The built-in ``judge`` reward: any OpenAI-compatible chat endpoint grades each sample."""
