"""Object storage (S3, GCS, Azure, HF Storage Buckets through their S3 gateway) through obstore: URLs
(:mod:`.urls`), one folder of a bucket with deadlines, bounded bodies, typed errors and conditional writes
(:mod:`.client`), and a LeRobot folder in a bucket read by byte ranges (:mod:`.files`)."""

from ..utils.lazy import lazy_face

__all__ = ["Bucket", "BucketURL", "BucketFiles", "ObjectInfo", "is_bucket_url", "parse_bucket_url"]

__getattr__, __dir__ = lazy_face(__name__, {
    "Bucket": "client", "ObjectInfo": "client", "BucketURL": "urls", "is_bucket_url": "urls",
    "parse_bucket_url": "urls", "BucketFiles": "files",
})
