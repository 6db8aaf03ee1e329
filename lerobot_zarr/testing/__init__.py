"""Test helpers for lerobot_zarr (not imported by the library itself)."""
