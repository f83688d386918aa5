"""The graders of the exercise notebooks (``exercises/NN_*.ipynb``), beside the library they grade.

Each exercise notebook imports its checks from one module of this package, named for the
chapter's topic; every check runs the student's answer and raises ``AssertionError`` with what a
teaching assistant would say (otter-grader shows it as the question's feedback). Every module also
has ``MUTANTS``: planted wrong answers its checks must give 0 points (``tools/mutants.py``).

=======  ===========================  ==========================================================
chapter  module                       grades
=======  ===========================  ==========================================================
00       ``hardware``                 GFLOP/s, a device-agnostic batch, a first all-reduce
01       ``cost_model``               Amdahl's law, a ring all-reduce's α-β time, bus bandwidth
02       ``data_parallel``            sharding, unequal shards, gradients averaged in one bucket
03       ``ddp``                      DistributedSampler, accumulation, a DDP training loop
04       ``mixed_precision``          loss scale, model-state memory, a float16 GradScaler step
05       ``tf_strategies``            TF_CONFIG, replicas' examples and losses, MirroredStrategy
06       ``keras_multi_device``       Keras 3 on many devices: migration, shards, dtype policies
07       ``mxnet_kvstore``            MXNet's kvstore arithmetic and a real ``dist_sync`` step
08       ``caffe2_onnx``              an ONNX net by hand (Caffe2's successor), initializer sizes
09       ``model_parallel``           pipeline bubble and schedules, a pipeline step, TP by hand
10       ``sharded_data_parallel``    ZeRO stages' memory, shard rows, FSDP2
11       ``checkpointing``            the latest complete checkpoint, its interval, DCP save/load
12       ``performance``              scaling efficiency, checkpointed activations, a ring all-reduce
13       ``transformer_flops``        a transformer's FLOPs, training days, a job's FLOPs
14       ``context_parallel``         online-softmax merge, zig-zag layout, ring attention
15       ``expert_parallel``          capacity, load-balancing loss, dispatch and combine
16       ``composing_parallelism``    a planner's pick, TP all-reduces, a 2-D FSDP × TP layout
=======  ===========================  ==========================================================

The machinery they share:

- ``student``     load the student's file afresh, find their function, a time limit on it
- ``ranks``       run a student's worker on gloo ranks; a failure explained in the student's words
- ``compare``     compare the ranks' tensors with one process's: the first that differs, by how much
- ``feedback``    call a student's plain function; name the classic mistake a result matches
- ``mutant``      :class:`~grading.mutant.Mutant`, one planted wrong answer and its expected hint

``grading`` imports :mod:`course_utils`; nothing in ``course_utils`` imports ``grading``
(``tests/test_autograde.py`` checks it). Importing this package imports no framework; the chapter
modules import the one they grade.
"""
