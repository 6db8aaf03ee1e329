"""The on-disk store format (version 3; 4 with a commit log; 5 with unresolved episodes): a Zarr v3 group that other tools can read. This
docstring is the contract; its code: :mod:`.tables` (array specs, the episode table, packs, limits), :mod:`.hashes`
(content hashes), :mod:`.state` (the root state: reading and validating it, file paths), :mod:`.log` (the commit
log's records), :mod:`.committing` (creating a store, the commit, an appended commit, ``frame_live``),
:mod:`.packs` (pack files), :mod:`.text` (text arrays), :mod:`.zarr_meta` (zarr's metadata documents),
:mod:`.cameras` (the mp4 index, which episodes this process serves). Where stores live (the cache layout,
``cache ls/rm/prune``) is :mod:`lerobot_zarr.sources`' business.

Layout of a store folder::

    zarr.json                  root group. Its write is the COMMIT POINT (atomic rename). It holds the root state in
                               attributes["lerobot_zarr"] (below) and the consolidated metadata of every array.
    <feature>/zarr.json        one array per stored feature, C order, frames first
    <feature>/c/<k>/0...       PACK k of that feature: ``rows[k]`` frames of many consecutive episodes. Raw storage:
                               exactly rows[k] * frame_bytes little-endian bytes, no header (the ``bytes`` codec
                               alone), created sparse at full size (unwritten rows are holes: no disk, read as 0).
                               Compact storage: a zarr shard of single-frame zstd chunks, its index first (then
                               the index's crc32c, checked on every read). A pack file is made when the first row
                               of it is written: a feature none of the pack's committed episodes holds (a camera
                               whose videos are missing) may have none (zarr reads it as fill value 0).
    frame_live/zarr.json, c/<k>
                               bool per row of pack k: True where the row holds a frame of a committed episode.
                               Feature arrays name it in their ``coordinates`` attribute, so xarray shows it as a
                               coordinate: rows that are not live (deleted, not fetched yet, unused room at the end
                               of a pack, one filler row per retired pack) hold no data.
    episode_start/ episode_end/ episode_length/ episode_task_index/ episode_chunk/ episode_offset/ episode_frame/
                               1-D int64 arrays over dimension "episode": a copy of the committed episode table for
                               zarr/xarray readers (``episode_frame``: row along ``frame`` of each episode's first
                               frame). lerobot_zarr reads the root. These copies and each array's ``zarr.json`` are
                               written in place before the root (a ``zarr.json`` may end in spaces: it is padded,
                               never truncated, so a killed writer leaves it whole); a crash between them and the
                               root leaves them ahead of it until the next commit or ``verify --repair``.
    .episode_stats/<k>-<offset>.json
                               per-episode statistics of the episode at row ``offset`` of pack k (writers' cache)
    .episode_stats/batch-<generation>.json
                               the same for the episodes a writer committed to the commit log since the fold before
                               (written by the fold of that generation, one file for them all: ``{"episodes":
                               [[k, offset, length], ...], "stats": {feature: {stat: {"shape", "data": base64 of
                               float64 rows}}}}``); an episode in none of these files (its writer killed before
                               the fold) gets its stats recomputed from its rows. Versions before it drop these
                               files and recompute.
    .editing/<k>-<offset>      the features of that episode an in-place edit changed since the last commit (a
                               JSON list): the next writer recomputes their stats and content hashes
    .retired/<feature>/<k>     pack files of retired packs, kept a while for readers of older commits
    .doctor/                   the dataset doctor's findings (see :mod:`lerobot_zarr.doctor.findings`): per episode
                               as checked (``findings.ndjson``), the sums for the checks of the whole dataset
                               (``moments.json``) and its last report (``report.json``); no part of the data
    .commit-log                commits appended after the root's (format 4 only: see "The commit log" below)
    .segments/<hash>.mp4       an episode's camera encoded to mp4 ahead of an export (the background encoder of a
                               recording, :mod:`lerobot_zarr.writing.segments`), named by the hash of its frames and
                               the encoder settings; a cache, no part of the data
    .lock                      writer lock (``flock``); not part of the zarr hierarchy
    .lerobot_zarr-creating     present only while a store is being laid out (before its first commit)
    .frame_live-pending        present while ``frame_live`` may lag the last commit (repaired by the next commit)

Packs. Episode e (the LeRobot ``episode_index``) is the ``length[e]`` rows from row ``offset[e]`` of pack
``chunk[e]`` in every feature array: an episode never spans two packs. A pack holds consecutive episodes up to a
target size (``pack_bytes``, default 32 MiB of the widest raw feature; an episode bigger than that gets a pack of
its own). Pack ids are never reused and a row, once given to an episode, is never given to another: appends fill
the unused rows of the last pack, then start a new pack; an edit that changes an episode's length (deleting
frames) writes it again into fresh rows. So a reader holding an older commit never finds other data where its
table points. Rows of deleted episodes stay in their pack (no longer live) until the whole pack is retired
(``packs.rows[k]`` = 0: zarr shows it as one filler row, and its files move to ``.retired/``); a writer moves the
live episodes of a pack that is mostly dead to fresh rows (compaction), so along ``frame`` episodes are in pack
order, which is episode order unless a writer moved some.

Readers need zarr's rectilinear chunk grid extension (``ZARR_ARRAY__RECTILINEAR_CHUNKS=True``; importing
lerobot_zarr sets it for its own process). Dimension names: ``frame`` first, then ``<feature>.<axis>``
(``height``/``width``/``channels`` for images, ``dim_<k>`` otherwise).

``attributes["lerobot_zarr"]`` (the root state, :class:`StoreState`; every key is validated when read):

- ``format_version``: 3, or 4 while the store's writer commits appends to the commit log (below), or 5 while the
  store lists ``unresolved`` episodes (below; versions before it refuse to read it). Versions 1 and
  2 (one chunk per episode) are read too; the first commit made by this version upgrades such a store in place
  (data files unchanged: chunk k becomes pack k with one episode at row 0).
- ``info``: LeRobot's ``meta/info.json`` (features, fps, robot_type, codebase_version...). ``tasks``: task strings
  by ``task_index``. ``stats``: LeRobot's ``meta/stats.json``. ``source``: where the data came from:
  ``{"kind": "local", "path", "fingerprint"}``, ``{"kind": "hub", "repo_id", "commit", "endpoint"}``,
  ``{"kind": "recorded"}`` (:func:`lerobot_zarr.create`), or ``{"kind": "edited", "from": <record>}`` once a writer
  changed it. A store only ever takes data from the source it records.
- ``episodes``: the episode table, one column per key, each the base64 of the zlib-compressed little-endian int64
  differences of the column (first value as is): ``start`` and ``length`` (frames ``[start, start + length)`` in
  LeRobot's global ``index``), ``task_index`` (first task, -1 if unknown), ``chunk`` and ``offset`` (pack and row),
  ``episode_index_shift`` / ``index_shift``: what the stored ``episode_index`` / ``index`` values exceed LeRobot's by
  (non-zero after earlier episodes were deleted; lerobot_zarr computes both from the table).
- ``packs``: ``{"rows": <column as above>, "next_row": n}``: rows of every pack id (0: retired), and the rows used
  in the last pack (appends go on from there). ``pack_bytes``: the target pack size of new packs.
- ``features``: for each stored array, ``{"kind": "numeric"|"image"|"video"|"string"|"language", "dtype",
  "frame_shape", "storage": "raw"|"compact"|"mp4", "shard_index": "start"|"end", "episodes"}`` where ``episodes``
  lists half-open ``[first, stop)`` ranges of episodes whose rows are committed. Only those rows hold data; other
  rows may hold zeros or garbage from an interrupted write. Images and videos are stored alike (uint8 HWC frames;
  a depth camera, ``is_depth_map`` in its info, uint16 or float32 frames of one channel: a video's 12-bit codes,
  an image's values); ``video`` says the source kept them as mp4. Text arrays (``string``: a ``str`` per frame;
  ``language``: a LeRobot language column's value as JSON text) have ``"dtype": "string"``, ``"frame_shape": []``,
  compact storage with ``{"codec": "vlen-utf8"}``: each inner chunk is zarr's vlen-utf8 encoding of one string
  (:mod:`.text`); equal consecutive frames may share their bytes (their index entries point at the same place).
  Compact arrays add ``"codec"`` (the frame codec of every inner chunk, e.g.
  ``{"codec": "zstd", "level": 3}``, ``{"codec": "delta-zstd", ...}``, ``{"codec": "jpeg", "quality": 90}``; the
  zarr metadata names the same codec, registered as ``lerobot_zarr.delta`` / ``lerobot_zarr.jpeg``). Cameras
  resized at transcode add ``"resize": {"from": [h, w], "size": [h, w], ...}``; ``frame_shape`` is the stored one.
  ``"mp4"`` arrays have no pack files: the camera stays in the source's mp4 files under ``<feature>/videos/`` with
  ``<feature>/mp4.json`` (the file, ``from_timestamp`` and ``to_timestamp`` of every episode), decoded on read; the
  zarr hierarchy does not list them. A file hard-linked from a local source has ``.<file>.linked`` beside it (its
  size, modification time and inode when linked: a rewrite of the source's file in place is refused at open).
- ``unavailable``: ``{feature: [[first, stop, reason], ...]}``: episodes whose frames of that feature the source
  cannot give (a missing or undecodable video, a timestamp without a frame), with why. They count as done.
- ``not_materialized``: ``{feature: reason}`` for features listed in ``info`` that have no array (videos...).
- ``retired``: ``[[pack, unix_time], ...]`` retired packs whose files may still be in ``.retired/``;
  ``generation``: counts commits; ``capacity_frames``: ring-buffer capacity or null; ``pending_tasks``: a
  ``set_task`` in progress, ``[[chunk, offset, task_index], ...]`` (finished by the next writer).
  ``stats_on_demand`` (optional): raw numeric features whose stats no commit computes (an RL buffer's float32
  cameras: the stats of a ``[3, H, W]`` frame, a pass over all its values, cost far more than its rows); they are absent from
  ``stats`` and from ``.episode_stats``, and readers compute them when asked (:mod:`.stats`). Versions before it
  ignore the key and compute every feature's stats at their next commit.

- ``unresolved`` (format 5 only): ``[[first, stop, frame_first, frame_stop], ...]``, in order: episodes ``[first,
  stop)`` (a row group of LeRobot's episode table, which a first open read only through its footer: reading every
  episode's length would read the whole table) whose start, length and task are not known yet; they hold frames
  ``[frame_first, frame_stop)``. Their entries in ``episodes`` are placeholders: the row group's frames laid out as
  a first episode of all of them but one frame for each of the others, one run of rows of one pack, which the
  episodes' own rows fill once known (no data moves); zarr's copies of the table hold -1 for them (but
  ``episode_chunk``). They are never committed for any feature. Readers resolve them before any use of every
  episode (:func:`.state.read_state`; the source is read, then a commit of their values), a reader of other
  episodes leaves them (``read_state(resolve=False)``), an open of one of them resolves its row group.
- ``hashes`` (stores made since content hashes exist; absent in earlier ones, whose episodes ``verify`` reports
  as unverifiable until ``verify --record``): ``{"algorithm": "crc32c", "features": {name: {"crc32c": <base64 of
  little-endian uint32, one per episode in table order>, "missing": [[first, stop], ...]}}, "files":
  {"<camera>/mp4.json": crc}, "root": crc}``. The CRC-32C (Castagnoli) of what the store holds for each committed
  episode and feature, computed while the rows are written (never by re-reading them), recorded at the commit
  that lists them: a raw feature's rows, byte for byte; a compact camera's encoded frames in row order, each as
  its 8-byte little-endian length then its bytes; a camera kept as mp4, the whole file holding the episode.
  ``missing``: episodes without one (not fetched yet, a camera unavailable in them, committed by an earlier
  version). An episode moved to other rows keeps its hash; an in-place edit's new hash comes with the commit
  after it. ``root``: the hash of these attributes but ``hashes``, as canonical JSON (sorted keys, no spaces);
  no commit is made on top of a root that differs from it.
  Sampling never checks hashes; :func:`lerobot_zarr.verify` does. A CRC finds damage, not forgery: whoever can
  rewrite the data can rewrite the root.

The commit log (:mod:`.log`). A writer may commit an append (one episode added, or the last one extended, after
dropping the oldest ones of a ring buffer) by appending a record to ``.commit-log`` instead of replacing the root:
its cost does not grow with the store (an RL buffer's per-episode commit). Its root is then format 4, which
versions before the log refuse to read. Each record is ``b"LZC1"``, the payload's length and CRC-32C (little-endian
uint32), then the payload, JSON: ``{"base", "generation", "drop", "extend", "episode": [length, task_index,
chunk, offset, episode_index_shift, index_shift], "packs": {"new": [rows of new packs], "next_row"}, "tasks":
[new task strings], "hashes": [[pack, offset, {feature: crc32c}], ...]}``. The committed state is the root's with
the valid records applied in order (:func:`.state.apply_record`): a record of a generation the root already holds
is skipped (a fold killed before removing the log), one whose ``base`` is not the state's generation is damage;
the first record cut short or failing its checksum ends the log (an append killed midway: never committed; the
next writer overwrites it). Rows are written and flagged in ``frame_live`` before their record, like a commit of
the root. zarr's copies, the root's ``stats`` and retired packs stay as of the root's commit until the writer
*folds* the log: a commit of the root holding everything (the dataset stats recomputed), then the log removed;
it folds every few dozen records, on request (``checkpoint()`` of an RL buffer), when it closes (back to format
3) and when a writer opens a format-4 store. Publishing a store (``push_store``) folds it first.

A store missing its root ``zarr.json`` (or whose root lacks these attributes) is not a store. Writers write pack
rows first, flush them, then replace the root ``zarr.json``; readers trust only what the root lists.

A store may come from elsewhere, so its files are untrusted input. A store holds no symbolic link: every file is
opened after checking each folder from the store root down (the root itself may be a link), ``O_NOFOLLOW`` at the
file, and a writer refuses a store holding a link anywhere. The root is at most ``MAX_ROOT_BYTES``, JSON at most
64 levels deep, its columns decompressed within their bound (``MAX_EPISODES`` entries, ``MAX_PACKS`` for the
packs); episodes follow each other from index 0 (``start``), offsets and shifts are bounded so that no sum
overflows int64, frames are at most ``MAX_FRAME_BYTES``, a raw pack file at most ``MAX_PACK_BYTES``; a shifted
``episode_index``/``index`` is checked against the stored first frame of its episode before it is served.
"""

from ..utils.fileio import WriterLock
from .committing import (
    check_new_store_location,
    commit,
    create_store,
    live_matches,
    live_runs,
    repair_live,
)
from .hashes import ContentHashes, root_hash
from .packs import open_pack, read_raw_rows, read_shard_index
from .state import (
    ATTRS_KEY,
    FORMAT_VERSION,
    MAX_ROOT_BYTES,
    StoreState,
    check_array_name,
    chunk_path,
    has_commit_point,
    live_path,
    read_root,
    read_state,
    retired_path,
    stats_path,
)
from .stats import on_demand_stats
from .tables import (
    DEFAULT_PACK_BYTES,
    MAX_EPISODES,
    MAX_FRAME_BYTES,
    MAX_FRAMES,
    MAX_PACK_BYTES,
    MAX_PACKS,
    MAX_ROWS,
    STORAGES,
    ArraySpec,
    EpisodeTable,
    PackLayout,
    Storage,
    array_spec,
    from_ranges,
    location_key,
    pack_rows_target,
    plan_packs,
    to_ranges,
)
from .zarr_meta import EPISODE_ARRAYS, LIVE_ARRAY

__all__ = [
    "FORMAT_VERSION",
    "MAX_EPISODES",
    "MAX_FRAMES",
    "MAX_FRAME_BYTES",
    "MAX_PACK_BYTES",
    "MAX_PACKS",
    "MAX_ROOT_BYTES",
    "MAX_ROWS",
    "ATTRS_KEY",
    "LIVE_ARRAY",
    "EPISODE_ARRAYS",
    "DEFAULT_PACK_BYTES",
    "STORAGES",
    "Storage",
    "ArraySpec",
    "array_spec",
    "EpisodeTable",
    "PackLayout",
    "StoreState",
    "chunk_path",
    "retired_path",
    "live_path",
    "stats_path",
    "on_demand_stats",
    "to_ranges",
    "from_ranges",
    "check_array_name",
    "check_new_store_location",
    "repair_live",
    "live_runs",
    "live_matches",
    "ContentHashes",
    "location_key",
    "root_hash",
    "has_commit_point",
    "read_root",
    "read_state",
    "create_store",
    "commit",
    "plan_packs",
    "pack_rows_target",
    "WriterLock",
    "open_pack",
    "read_raw_rows",
    "read_shard_index",
]
