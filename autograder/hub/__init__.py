"""A class on this machine through a real JupyterHub: `make hub` (python -m autograder.hub).

- classroom.py: what the class needs before the hub starts, made once and reused: the Unix accounts
  (an instructor and N students, homes only they may enter), the two environments (students: the
  student distribution only; the instructor: the course repository, with grading), the exchange,
  the Jupyter configuration of each role and the hub's proxy (configurable-http-proxy, from npm).
- spawner.py: each user's server started as that user, in cgroups that hold its CPU and memory
  limits; the trial login.
- jupyterhub_config.py: the hub's configuration, read by `jupyterhub -f`.
- __main__.py: the command: prepares the class, prints where to log in and as whom, runs the hub
  until Ctrl-C, then stops every server it started.
"""
