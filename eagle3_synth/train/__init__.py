"""What the drafter trainers read, made from built rows: the loss mask and the JSONL
exports (`export`), the reduced draft vocabulary (`draft_vocab`) and the target's hidden states
in each trainer's file layout (`hidden_states/`). Nothing here trains: the trainers do
(docs/training/)."""
