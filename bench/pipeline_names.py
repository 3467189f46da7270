"""The rows bench.pipeline times, by name, and how they group (no TensorFlow here: bench.pipeline_rows builds them).

- MAIN: the `old` and `new` training pipelines on original PNGs and on JPEG records, each beside its decode limit
  (LIMIT_OF);
- STAGES: the JPEG-records training pipeline built up one stage at a time, for the per-image cost breakdown;
- ABLATION and THREADS: the training pipeline with one thing left out, and under other thread pools.
"""

OLD_PNG, NEW_PNG, PNG_LIMIT = "old, original PNGs", "new, original PNGs", "PNG decode limit"
NEW_JPEG, JPEG_LIMIT = "new, JPEG records", "JPEG decode limit"
MAIN = (OLD_PNG, NEW_PNG, PNG_LIMIT, NEW_JPEG, JPEG_LIMIT)
LIMIT_OF = {OLD_PNG: PNG_LIMIT, NEW_PNG: PNG_LIMIT, NEW_JPEG: JPEG_LIMIT}

# Cumulative: each stage is the one before plus one step (crop replaces the whole decode by a window decode).
READ, DECODE, CROP, FLIP, BATCH, NORMALISE = (
    "read: TFRecord read, shuffle, parse", "decode: whole image, then cut the window", "crop: decode only the window",
    "flip", "batch (uint8, what training delivers)", "host float32 normalisation (optional)")
STAGES = (READ, DECODE, CROP, FLIP, BATCH, NORMALISE)

NO_SHUFFLE, NO_COUNTERS, NO_AUGMENT = (
    "without the shuffle buffer", "without the skip counters (integrity)", "without the random window and flip")
ABLATION = (NO_SHUFFLE, NO_COUNTERS, NO_AUGMENT)  # with BATCH (their reference), NORMALISE, NEW_JPEG and JPEG_LIMIT

SHARED_POOL, PRIVATE_2, PRIVATE_4, INTRA_1 = (
    "TF's shared pool", "private_threadpool_size 2", "private_threadpool_size 4", "max_intra_op_parallelism 1")
THREADS = (SHARED_POOL, PRIVATE_2, PRIVATE_4, INTRA_1)
