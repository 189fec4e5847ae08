"""Train the clean inverter on a GPU in minutes: prepare here, train on the device, unpack here.

* ``python -m benchmarks.gpu_inverter.prepare`` (here, on the CPU): the public corpus
  (:func:`textcrafter_rag.attacks.texts.public_corpus`), the held-out test sentences, their exact
  vectors and MiniLM's weights (int8/float16) into a bundle folder of about 28 MiB that fits the
  device's carry limit (:mod:`.prepare`, :mod:`.bundle`);
* ``python -m benchmarks.gpu_inverter train`` (on the device, or ``--device cpu``): embed, train,
  measure, write compact weights and the strength rows (:mod:`.train`); it imports only what the GPU
  machine has (:mod:`.lean`);
* ``python -m benchmarks.gpu_inverter unpack`` (here): a verified inverter artifact with its strength
  rows beside it, for ``textcrafter audit --attacker DIR`` and ``benchmarks.frontier --inverter DIR``.
"""
