"""The dtq demo project."""
