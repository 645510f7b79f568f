"""A console backend for tests: records every press, intervention and key set."""


class RecordingBackend:
    def __init__(self):
        self.calls = []

    def state(self):
        return {"intervening": False, "cameras": ["front"]}

    def camera_jpeg(self, name):
        return b"\xff\xd8jpeg" if name == "front" else None

    def press(self, event):
        self.calls.append(("press", event))

    def intervene(self, how):
        self.calls.append(("intervene", how))

    def set_keys(self, keys):
        self.calls.append(("keys", keys))
