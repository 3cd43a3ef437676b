"""The emulated drives, served from the host: diskmodel.py holds the
timing models of the media (HDD, SSD, cloud volume), their profiles and
parameter files; drive.py the drive around a model (command queue, NCQ,
write cache, channels); nbd.py the NBD server that QEMU attaches to the
guest as an ordinary virtio disk, replying when the model says a command
completes. The host tooling (prism.host.vm) starts the server and the
benchmark reads the models' profiles; the drives import nothing of prism
outside this package.
"""
