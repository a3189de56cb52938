"""`tuner check`: find the silent failures of a distributed run before it is paid for.

Two parts, one report (docs/check.md lists every check, its cost and how to skip it):

* launch checks (`preflight`, `exchange`): on every machine, before any rank starts: the
  build, versions, script, model/data paths, output directory, free disk, host RAM,
  network interface, GPUs; machines exchange these facts at machine 0's address and port,
  which proves that address reachable and the port free. No torch import.
* effective-run checks (`observer` in each rank, `analyse` in the launcher): a short,
  bounded rehearsal on the real ranks; the observer wraps accelerate's ``Accelerator``
  (its constructor, ``prepare``, ``backward``) and the prepared optimizer's ``step``,
  writes what each rank saw to a file, and `analyse` compares it with the plan.
"""
