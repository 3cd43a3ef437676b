"""Host tooling: what prepares and boots a guest. kernels.py pins the
supported kernels and fetches them, debugkernel.py builds a pin's own
source with lockdep, KASAN and kmemleak (the debug kernel, once per
release), build.py builds prism-iosched.ko against one, twin.py builds
an older release of it (v2, 3.0.0) under names of its own, to load beside it;
vm.py boots a kernel under QEMU with virtme-ng (attaching disks and the
emulated drives' NBD servers, and running a command of the guest side in
it), klog.py reads the guest's kernel log for problem reports;
blktests.py and pgimage.py prepare on the host what a guest run needs
(blktests built in the cache, the pgbench database image). It sits below
the benchmark (prism.bench) and above the guest side (prism.guest, whose
entry points and disk serials it names) and the emulated drives
(prism.drives).
"""
