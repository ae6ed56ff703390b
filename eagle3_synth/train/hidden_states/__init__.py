"""`hidden-states`: the target's hidden states for built rows, in speculators' or SpecForge's layout.

`compute` (the rows, the files to write, the forward passes), `layers` (which layers, captured by
hooks), `layouts` (each trainer's files, written atomically), `specforge_target` (the target folder
SpecForge's offline route reads), `check` (the files against the model's own logits), `job` (one
`hidden-states` command from start to end).
"""
