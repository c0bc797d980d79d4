"""A class on this machine through a real JupyterHub: `make hub` (python -m autograder.hub). docs/CLASS.md tells it whole.

- disks.py: each student's disk, an image of its own holding her home and her inbound.
- cgroups.py: the groups that hold a student's server (CPU, memory and socket memory, processes) and the end of all
  that is in them.
- classroom.py: what the class needs before the hub starts, made once and reused: the Unix accounts, the two
  environments (students: the student distribution only; the instructor: the course repository, with grading),
  the disks, the exchange (the instructor's before anyone logs in), each role's Jupyter configuration and the hub's
  proxy (configurable-http-proxy, from npm); and the refusal of a checkout other accounts can read.
- wall.py: what a student's server sees of the machine (bubblewrap): her home and inbound, the system read-only.
- spawner.py: each user's server started as that user, a student's in her cgroups and behind her wall; the trial login.
- relay.py: a student's server runs in a network of its own; the relay, root's, carries the proxy's connections to
  it and its connections to the hub's API, and nothing else.
- seccomp.py: the system calls her wall refuses (namespaces, mounts, the keyring, BPF, io_uring...).
- bounds.py: what a user may make the hub keep: no student tokens, requests bounded before they are read, a rotated log.
- proxy.py: the hub's front door, checked: after every start of the proxy, it alone listens on the hub's port ([::1]
  at that port held by the hub), or the hub stops, naming who holds it.
- jupyterhub_config.py: the hub's configuration, read by `jupyterhub -f`: an origin of its own for each server.
- client.py: talking to the hub from a program as a browser does (the tests and the benchmark).
- __main__.py: the command: prepares the class, prints where to log in and as whom, runs the hub until Ctrl-C, then
  stops every server it started and ends whatever they left; with --remove (`make hub-remove`), takes the class down.
"""
