"""``rollyard env-server``: a rollout plugin served over authenticated HTTP (docs/remote.md).

:mod:`.wire` is what both ends agree on, :mod:`.app` the aiohttp application, :mod:`.command`
the CLI; the trainer's side is :mod:`rollyard.run.remote_backend`.
"""
