"""Train the clean inverter on a GPU in minutes: prepare here, train on the device, unpack here.

* ``python -m benchmarks.gpu_inverter.prepare`` (here, on the CPU): the public corpus
  (:func:`textcrafter_rag.attacks.texts.public_corpus`), the held-out test sentences, their exact
  vectors and MiniLM's weights (int8/float16) into a bundle folder of about 28 MiB that fits the
  device's carry limit (:mod:`.prepare`, :mod:`.bundle`);
* ``python -m benchmarks.gpu_inverter train`` (on the device, or ``--device cpu``): embed, train,
  measure, write compact weights and the strength rows (:mod:`.train`); with ``--adaptive``, then attack
  the headline's and the two-stage store's defenses, adaptive attacker included (:mod:`.adaptive`); it
  imports only what the GPU machine has (:mod:`.lean`; the two-stage jobs also need ``cryptography``,
  carried as wheels);
* ``python -m benchmarks.gpu_inverter unpack`` (here): a verified inverter artifact with its strength
  rows beside it, for ``textcrafter audit --attacker DIR`` and ``benchmarks.frontier --inverter DIR``;
* ``python -m benchmarks.gpu_inverter.record`` (here): ``results/attack_strength_gpu.{json,md}`` from one
  or more device runs (:mod:`.record`).
"""
