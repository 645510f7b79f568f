"""Actor/learner runtime: transports (no pickle), learner process, actor loop."""
