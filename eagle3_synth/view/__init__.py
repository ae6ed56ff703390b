"""Looking at rows, for people: `where` (which samples: `--where`, `--random/--shortest/--longest`),
`render` (a row with its boundaries marked), `decode` (a row's output as an assistant message)."""
