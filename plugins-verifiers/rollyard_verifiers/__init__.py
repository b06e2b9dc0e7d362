"""rollyard-verifiers: run verifiers environments through a Renderer-to-SGLang bridge."""
