"""The benchmarks, inside the package so an installed rocketstore has them.

``rocketstore bench [--quick] [store|broker|messaging ...]`` (or ``python -m
rocketstore.tools.bench``) runs them; each module also runs alone (``python -m
rocketstore.tools.bench_store --help``), and the checkout's ``tools/*.py`` scripts are thin
wrappers that run these modules from the checkout.

  bench_store      the store's put/get/dispatch workloads and the headline put path, against
                   an f.write loop, Python mmap+struct and lmdb in the same run
  bench_scan       the tag-filter scan over consume-queue units (``bench_store``'s tag_scan)
  bench_broker     ``rocketstore namesrv`` + ``broker`` processes driven by our client and the
                   C++ client, against a TCP echo floor and Redis Streams in the same run
  bench_messaging  producer -> broker -> push consumer end to end, against the raw store
  servers          start/stop server processes (the benchmarks' and the tests')
"""
