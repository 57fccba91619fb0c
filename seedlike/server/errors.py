"""What the inference service tells its callers when it cannot answer (no JAX here: the stream
front ends, processes without JAX, raise it too)."""


class ServerStopping(RuntimeError):
    """The server is shutting down: `finished` means training is over (streams end with OK);
    otherwise the learner is only stopping (preemption, restart) and actors should reconnect."""

    def __init__(self, finished: bool):
        super().__init__("training finished" if finished else "server stopping")
        self.finished = finished
