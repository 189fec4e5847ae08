"""Train the clean inverter on a GPU in minutes: ``python -m benchmarks.gpu_inverter prepare|train|unpack``.

* ``prepare`` (here, on the CPU): the public corpus (:func:`textcrafter_rag.attacks.texts.public_corpus`),
  the held-out test sentences, their exact vectors and MiniLM's weights (int8/float16) into a bundle
  folder of about 30 MB that fits the device's carry limit (:mod:`.prepare`, :mod:`.bundle`);
* ``train`` (on the device, or ``--device cpu``): embed, train, measure, write compact weights and the
  strength rows (:mod:`.train`); it imports only what the GPU machine has (:mod:`.lean`);
* ``unpack`` (here): a verified inverter artifact with its strength rows beside it, for
  ``textcrafter audit --attacker DIR`` and ``benchmarks.frontier --inverter DIR``.
"""
