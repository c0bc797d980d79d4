# syntax=docker/dockerfile:1
# The instructors' image: the repository, installed editable, with nbgrader's instructor tools and
# bubblewrap, for releasing, collecting and grading (`python -m autograder grade`). Built from the
# repository root:
#
#   docker build -f deploy/kubernetes/instructor.Dockerfile -t registry.example.org/seqcourse/instructor:2026.1 .
#
# The Python the course is tested with; update its patch release, and pin it by digest, each term.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm
FROM ${PYTHON_IMAGE}
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

# bubblewrap: the sandbox each submission is graded in (autograder/grading/sandbox.py).
# libnss-wrapper: names the students' uids for `nbgrader collect` (entrypoint.sh).
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap libnss-wrapper \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --uid 1000 --gid 100 --create-home --shell /bin/bash jovyan

# The repository (instructor.Dockerfile.dockerignore leaves out .git, the virtual environment and any
# class's work or grades), installed editable at /srv/seqcourse, where the course folder's volume is
# mounted; /opt/seqcourse is the copy the entrypoint fills that volume from.
COPY . /srv/seqcourse
WORKDIR /srv/seqcourse
RUN pip install --no-cache-dir -c constraints.txt --index-url "$TORCH_INDEX_URL" torch \
 && pip install --no-cache-dir -c constraints.txt -e ".[grading,lab]" jupyterhub
RUN cp -R /srv/seqcourse /opt/seqcourse \
 && date -u +%Y-%m-%dT%H:%M:%SZ > /opt/seqcourse/.seqcourse-image \
 && chown -R 1000:100 /srv/seqcourse
COPY --chmod=0755 deploy/kubernetes/entrypoint.sh /usr/local/bin/seqcourse-entrypoint

# The instructors' role outside the hub too (the hub's pre_spawn_hook sets the same).
ENV JUPYTER_CONFIG_PATH=/opt/seqcourse/jupyter-config/instructor
USER 1000:100
ENTRYPOINT ["/usr/local/bin/seqcourse-entrypoint"]
CMD ["jupyterhub-singleuser"]
