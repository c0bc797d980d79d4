# syntax=docker/dockerfile:1
# The students' image: the course's student distribution and what runs it, nothing else of the
# repository (no solutions, no reference solutions_lib, no mistake catalogs or hidden cases: an
# installed copy of those would let any student print the reference). Built from the repository root:
#
#   docker build -f deploy/kubernetes/student.Dockerfile -t registry.example.org/seqcourse/student:2026.1 .
#
# A GPU image: --build-arg TORCH_INDEX_URL=<the PyTorch wheel index for your nodes' CUDA>.
# The Python the course is tested with; update its patch release, and pin it by digest, each term.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# Stage 1, thrown away: the repository, only to build the student distribution.
FROM ${PYTHON_IMAGE} AS release
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
COPY . /src
WORKDIR /src
RUN pip install --no-cache-dir -c constraints.txt --index-url "$TORCH_INDEX_URL" torch \
 && pip install --no-cache-dir -c constraints.txt -e ".[grading]"
RUN python -m autograder release --student-dist /dist

# Stage 2, the image: from the repository only the pins, the students' Jupyter configuration, the
# entrypoint and the distribution built above.
FROM ${PYTHON_IMAGE}
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# libnss-wrapper: a name for the uid of each student's own (entrypoint.sh), which nbgrader's submit needs.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libnss-wrapper \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --uid 1000 --gid 100 --create-home --shell /bin/bash jovyan
COPY constraints.txt /opt/seqcourse/constraints.txt
COPY jupyter-config/student /opt/seqcourse/jupyter-config/student
COPY --from=release /dist /opt/seqcourse/dist
# torch (pinned, CPU unless told otherwise); the distribution with its `check` extra (nbgrader,
# nbclient, pytest, ipykernel: `python -m autograder check`); JupyterLab and ipywidgets (progress bars);
# nbgrader (the Assignment List: fetch and submit); jupyterhub (jupyterhub-singleuser, the server
# command the hub starts). Every version from constraints.txt.
RUN pip install --no-cache-dir -c /opt/seqcourse/constraints.txt --index-url "$TORCH_INDEX_URL" torch \
 && pip install --no-cache-dir -c /opt/seqcourse/constraints.txt "/opt/seqcourse/dist[check]" jupyterlab ipywidgets nbgrader jupyterhub
# The students' role outside the hub too (the hub's pre_spawn_hook sets the same).
ENV JUPYTER_CONFIG_PATH=/opt/seqcourse/jupyter-config/student
COPY --chmod=0755 deploy/kubernetes/entrypoint.sh /usr/local/bin/seqcourse-entrypoint
# The hub runs each student's server as a uid of their own (values.yaml); 1000 is the default.
USER 1000:100
WORKDIR /home/jovyan
ENTRYPOINT ["/usr/local/bin/seqcourse-entrypoint"]
CMD ["jupyterhub-singleuser"]
