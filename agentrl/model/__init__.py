"""Tokenizer training, tiny models from config, and loading/saving in HF form."""
