"""`hidden-states`: the target's hidden states for built rows, in speculators' or SpecForge's layout.

`job` (the rows, the files to write, the forward passes, the files checked against the model's own
logits, one `hidden-states` command from start to end), `layouts` (which layers, captured by hooks;
each trainer's files, written atomically; the target folder SpecForge's offline route reads),
`sglang_capture` (the states captured by SGLang).
"""
