"""The job page's log without framework noise: what TensorFlow, absl and Keras print is hidden and counted; the
training's own lines, errors and tracebacks always stay. The lines are as real jobs print them (the box's job
logs, Horovod's rank prefixes included; the GPU-only lines as TensorFlow 2.x prints them on a GPU node)."""

from __future__ import annotations

import pytest

from portal.logview import filter_log, framework_noise

NOISE = [
    "WARNING:tensorflow:Callback method `on_train_batch_end` is slow compared to the batch time (batch time: "
    "0.5949s vs `on_train_batch_end` time: 1.0996s). Check your callbacks.",
    "[1,0]<stderr>:WARNING:tensorflow:Callback method `on_train_batch_end` is slow compared to the batch time "
    "(batch time: 0.1793s vs `on_train_batch_end` time: 0.4304s). Check your callbacks.",
    "WARNING:absl:`lr` is deprecated in Keras optimizer, please use `learning_rate` or use the legacy optimizer.",
    "INFO:tensorflow:Assets written to: /home/alice/jobs/7/export/assets",
    "/opt/dsportal/venv/lib/python3.11/site-packages/tensorboard/default.py:30: UserWarning: pkg_resources is "
    "deprecated as an API.",
    "[1,1]<stderr>:/usr/lib/python3/dist-packages/keras/src/trainers/epoch_iterator.py:151: UserWarning: Your input "
    "ran out of data; interrupting training.",
    "2026-11-22 10:00:00.123456: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on. You may see "
    "slightly different numerical results due to floating-point round-off errors.",
    "[1,0]<stderr>:2026-11-22 10:00:00.223456: I tensorflow/core/platform/cpu_feature_guard.cc:210] This TensorFlow "
    "binary is optimized to use available CPU instructions in performance-critical operations.",
    "2026-11-22 10:00:01.000000: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT Warning: Could not "
    "find TensorRT",
    "2026-11-22 10:00:01.000000: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261] Unable to register "
    "cuDNN factory: Attempting to register factory for plugin cuDNN when one has already been registered",
    "[1,1]<stderr>:E0000 00:00:1732000000.111111   12345 cuda_blas.cc:1418] Unable to register cuBLAS factory: "
    "Attempting to register factory for plugin cuBLAS when one has already been registered",
    "W0000 00:00:1732000000.211111   12345 computation_placer.cc:177] computation placer already registered.",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
]
KEPT = [
    "chexnet.train: epoch 1/4: loss/train=0.0651 loss/val=0.1354 auroc/mean=0.5777 on 17 validation images, "
    "lr=0.002, images/sec=26.4 (all workers)",
    "[1,0]<stderr>:chexnet.train: rank 0 of 1 on vm (local rank 0 of 1)[1,0]<stderr>:",
    "[1,0]<stdout>:22/22 - 34s - loss: 0.0688 - lr: 0.0010 - val_loss: 0.1688 - val_auroc: 0.6931 - 34s/epoch",
    "Epoch 1/4",
    "slurmstepd-tnode1: error: *** JOB 16 ON tnode1 CANCELLED AT 2026-11-22T23:53:55 DUE TO NODE FAILURE ***",
    "Traceback (most recent call last):",
    "[1,0]<stderr>:tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:",
    "ValueError: image_size: 7 is out of range",
    "ERROR:tensorflow:Failed to restore the checkpoint",
    "2026-11-22 10:05:00.000000: W tensorflow/core/framework/op_kernel.cc:1827] OP_REQUIRES failed at "
    "conv_ops.cc:1068 : RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[8,64,112,112]",
    "W0000 00:00:1732000000.3   12345 gpu_device.cc:2344] Cannot dlopen some GPU libraries. Skipping registering "
    "GPU devices...",
    "2026-11-22 10:00:02.000000: E tensorflow/core/common_runtime/some.cc:12] Something real failed",
    "F0000 00:00:1732000000.4   12345 cuda_executor.cc:12] Check failed: device ordinal",
    "  import pkg_resources",  # indented, but not after a warning: kept
    "",
]


@pytest.mark.parametrize("line", NOISE)
def test_framework_noise_is_recognised(line):
    assert framework_noise(line) and framework_noise(line + "\n")


@pytest.mark.parametrize("line", KEPT)
def test_training_output_and_errors_are_never_noise(line):
    assert not framework_noise(line)


def test_a_real_two_rank_log_keeps_the_training_and_counts_what_it_hid():
    log = "\n".join([
        "chexnet: local job on vm, 2 worker(s), time limit 04:00:00",
        "[1,0]<stderr>:/opt/venv/lib/python3.11/site-packages/tensorboard/default.py:30: UserWarning: pkg_resources "
        "is deprecated as an API.",
        "[1,1]<stderr>:chexnet.train: rank 1 of 2 on vm (local rank 1 of 2)",  # the other rank, in between
        "[1,0]<stderr>:  import pkg_resources",  # the warning's source line
        "[1,0]<stderr>:WARNING:tensorflow:From /opt/venv/x.py:12: calling Zeros.__init__ (from "
        "tensorflow.python.ops.init_ops) with dtype is deprecated and will be removed in a future version.",
        "[1,0]<stderr>:Instructions for updating:",
        "[1,0]<stderr>:Call initializer instance with the dtype argument instead of passing it to the constructor",
        "[1,0]<stderr>:chexnet.train: epoch 1/1: loss/train=0.0688 auroc/mean=0.6931 images/sec=42.8 (all workers)",
        "[1,0]<stderr>:WARNING:tensorflow:Callback method `on_train_batch_end` is slow compared to the batch time.",
        "[1,0]<stderr>:Traceback (most recent call last):",
        '[1,0]<stderr>:  File "/opt/venv/lib/python3.11/site-packages/chexnet/train.py", line 300, in main',
        "[1,0]<stderr>:    model.fit(dataset)",
        "[1,0]<stderr>:ValueError: the dataset is empty",
        "",
    ])
    shown, hidden = filter_log(log)
    assert shown == "\n".join([
        "chexnet: local job on vm, 2 worker(s), time limit 04:00:00",
        "[1,1]<stderr>:chexnet.train: rank 1 of 2 on vm (local rank 1 of 2)",
        "[1,0]<stderr>:chexnet.train: epoch 1/1: loss/train=0.0688 auroc/mean=0.6931 images/sec=42.8 (all workers)",
        "[1,0]<stderr>:Traceback (most recent call last):",
        '[1,0]<stderr>:  File "/opt/venv/lib/python3.11/site-packages/chexnet/train.py", line 300, in main',
        "[1,0]<stderr>:    model.fit(dataset)",
        "[1,0]<stderr>:ValueError: the dataset is empty",
        "",
    ])
    assert hidden == 6


def test_a_traceback_right_after_a_warning_stays_whole():
    log = ("/x/y.py:3: DeprecationWarning: old\n"
           "Traceback (most recent call last):\n"
           '  File "/x/y.py", line 3, in <module>\n'
           "KeyError: 'a'\n")
    assert filter_log(log) == (log.split("\n", 1)[1], 1)


def test_line_endings_are_kept_and_an_empty_log_is_empty():
    assert filter_log("Epoch 1/2\r\nWARNING:absl:x\r\nEpoch 2/2") == ("Epoch 1/2\r\nEpoch 2/2", 1)
    assert filter_log("") == ("", 0)
