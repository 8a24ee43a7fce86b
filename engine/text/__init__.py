"""Text around the model: tokenizer, chat template, special-token escaping, detokenizing, stop strings.

Torch-free; the gateway's token counting and the engine's sequence outputs both use it.
"""
