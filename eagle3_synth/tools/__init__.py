"""Looking at data: where/render/decode, validate, export, training inputs, doctor."""
