"""Demo tasks for the dtq demo project."""
