"""The rows bench.pipeline times, by name, and how they group (no TensorFlow here: bench.pipeline_rows builds them).

- MAIN: the `sequential` and `parallel` training pipelines on original PNGs and the `parallel` one on JPEG records,
  each beside its decode limit (LIMIT_OF);
- STAGES: the JPEG-records training pipeline built up one stage at a time, for the per-image cost breakdown;
- ABLATION and THREADS: the training pipeline with one thing left out, and under other thread pools.
"""

SEQUENTIAL_PNG, PARALLEL_PNG, PNG_LIMIT = "sequential, original PNGs", "parallel, original PNGs", "PNG decode limit"
PARALLEL_JPEG, JPEG_LIMIT = "parallel, JPEG records", "JPEG decode limit"
MAIN = (SEQUENTIAL_PNG, PARALLEL_PNG, PNG_LIMIT, PARALLEL_JPEG, JPEG_LIMIT)
LIMIT_OF = {SEQUENTIAL_PNG: PNG_LIMIT, PARALLEL_PNG: PNG_LIMIT, PARALLEL_JPEG: JPEG_LIMIT}

# Cumulative: each stage is the one before plus one step (crop replaces the whole decode by a window decode).
READ, DECODE, CROP, FLIP, BATCH, NORMALISE = (
    "read: TFRecord read, shuffle, parse", "decode: whole image, then cut the window", "crop: decode only the window",
    "flip", "batch (uint8, what training delivers)", "host float32 normalisation (optional)")
STAGES = (READ, DECODE, CROP, FLIP, BATCH, NORMALISE)

NO_SHUFFLE, NO_COUNTERS, NO_AUGMENT = (
    "without the shuffle buffer", "without the skip counters (integrity)", "without the random window and flip")
ABLATION = (NO_SHUFFLE, NO_COUNTERS, NO_AUGMENT)  # with BATCH (their reference), NORMALISE, PARALLEL_JPEG, JPEG_LIMIT

SHARED_POOL, PRIVATE_2, PRIVATE_4, INTRA_1 = (
    "TF's shared pool", "private_threadpool_size 2", "private_threadpool_size 4", "max_intra_op_parallelism 1")
THREADS = (SHARED_POOL, PRIVATE_2, PRIVATE_4, INTRA_1)
