"""The commands behind ``robot-rl``: each module is one command; nothing below them imports them."""
