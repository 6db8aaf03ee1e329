"""Integrations with other libraries, each imported on its own so that only what is used needs its extra:
:mod:`.torch` (tensors, loaders, the ``LeRobotDataset`` drop-in; faced by :mod:`lerobot_zarr.torch`), :mod:`.rl`
(LeRobot's replay buffer; :mod:`lerobot_zarr.rl`), :mod:`.xarray` (``ds.to_xarray()``) and :mod:`.view` (plots,
rerun)."""

__all__: list[str] = []
