"""The data contract: model profiles and markers, boundary columns, the row."""
