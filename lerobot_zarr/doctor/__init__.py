"""The dataset doctor: every defect of a LeRobot dataset found and named, during the transcode (the data passes by
anyway) or on its own over a store or a source.

Its parts: the kinds of defect and their thresholds (:mod:`.kinds`), the report (:mod:`.report`), the checks of
numeric features, timestamps and indices on batches of episodes (:mod:`.checks`) and of cameras (:mod:`.cameras`),
the reductions over the whole dataset (:mod:`.reduce`), one pass over a dataset's episodes that the transcode feeds
(:mod:`.checkup`), the findings kept in a store (:mod:`.findings`), and the doctor run on its own over a store or a
source (:mod:`.scan`). Nothing here changes a dataset's data: dropping the defective episodes is the writer's
(``ds.drop_defective``, ``lerobot-zarr edit --drop-defective``).
"""

from ..utils.lazy import lazy_face

__all__ = ["KINDS", "THRESHOLDS", "SEVERITIES", "Kind", "Defect", "DoctorReport", "Checkup", "read_report",
           "doctor_store", "doctor_source", "scan_tables"]

__getattr__, __dir__ = lazy_face(__name__, {
    "KINDS": "kinds", "THRESHOLDS": "kinds", "SEVERITIES": "kinds", "Kind": "kinds", "Defect": "kinds",
    "DoctorReport": "report", "Checkup": "checkup", "read_report": "findings", "doctor_store": "scan",
    "doctor_source": "scan", "scan_tables": "scan",
})
