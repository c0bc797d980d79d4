"""deploy/kubernetes/: the course on JupyterHub's Helm chart, checked without a cluster, Helm or network.

- values.yaml uses only keys that the pinned chart documents (deploy/kubernetes/chart-keys.txt, the key
  paths of its values.schema.yaml, vendored with their tag and commit), with the types and values the
  schema allows; under a key the schema leaves free-form (hub.config's sections, hub.extraConfig,
  hub.loadRoles, singleuser.storage.extraVolumes, custom, ...) anything goes, as it does for the chart;
- the hook in hub.extraConfig compiles, and picks the image, the Jupyter configuration, the uid and the
  resources for a user in each course group (a JupyterHub Spawner with KubeSpawner 7.0.0's traits, users
  and groups in a real JupyterHub database), and refuses anyone in neither;
- the exchange, the groups, the course id and the username rule agree with the rest of the course;
- the Dockerfiles copy files that exist, run commands and options that exist, pin what they install,
  and the students' image ships the student distribution and nothing else of the repository;
- the instructors' entrypoint fills the course folder from the image and keeps what grading wrote.

Not checked here: that Helm renders these values (no Helm), that a cluster schedules the pods, mounts
the NFS exchange or lets bubblewrap start in a pod (no cluster), or that the images build (no Docker).
"""
import contextlib
import importlib.metadata
import io
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from autograder.grading import ids
from conftest import ROOT

DEPLOY = ROOT / "deploy" / "kubernetes"
VALUES = DEPLOY / "values.yaml"
KEYS = DEPLOY / "chart-keys.txt"
COURSE_ID_SETTING = re.compile(r"""\bc\.CourseDirectory\.course_id\s*=\s*["']([^"']+)["']""")


def _course_id():
    """The course's nbgrader course id: nbgrader_config.py's, where it sets one, else the one the README
    tells a class's JupyterHub to set (the repository's config leaves it to the machine), else the one
    of the one-machine hub."""
    for source in (ROOT / "nbgrader_config.py", ROOT / "README.md"):
        found = COURSE_ID_SETTING.findall(source.read_text(encoding="utf-8"))
        if found:
            assert len(set(found)) == 1, f"{source.name} names several course ids: {found}"
            return found[0]
    from autograder.hub.classroom import COURSE  # a class on one machine's hub (make hub)

    return COURSE


COURSE_ID = _course_id()
# nbgrader's JupyterHub convention (nbgrader/auth/jupyterhub.py): nbgrader-<course> students, formgrade-<course> instructors
STUDENTS, INSTRUCTORS = f"nbgrader-{COURSE_ID}", f"formgrade-{COURSE_ID}"
GRADE_JOBS = 4  # README.md (deploy/kubernetes): `python -m autograder grade /srv/seqcourse --jobs 4`


def load_values(text=None):
    return yaml.safe_load(VALUES.read_text(encoding="utf-8") if text is None else text)


# ------------------------------------------------------------------ the chart's documented keys


def split_path(path):
    """'hub.config.<^[A-Z].*$>.x' -> ['hub', 'config', '<^[A-Z].*$>', 'x']: a <pattern> segment may hold dots."""
    parts, i = [], 0
    while i < len(path):
        if path[i] == "<":
            j = path.index(">", i)
            parts.append(path[i:j + 1])
            i = j + 2
        else:
            j = path.find(".", i)
            j = len(path) if j < 0 else j
            parts.append(path[i:j])
            i = j + 1
    return parts


class Key:
    def __init__(self):
        self.keys, self.patterns, self.types, self.open, self.enum = {}, {}, (), False, None


def load_chart_keys(text=None):
    """(header {tag, commit, appVersion}, the tree of documented keys) from chart-keys.txt."""
    text = KEYS.read_text(encoding="utf-8") if text is None else text
    header, root = {}, Key()
    for line in text.splitlines():
        if line.startswith("#"):
            m = re.match(r"#\s*(tag|commit|appVersion)\b[^:]*:\s*(\S+)", line)
            if m:
                header[m.group(1)] = m.group(2)
            continue
        if not line.strip():
            continue
        path, types, *flags = line.split("\t")
        node = root
        for part in split_path(path):
            table = node.patterns if part.startswith("<") else node.keys
            node = table.setdefault(part[1:-1] if part.startswith("<") else part, Key())
        node.types = () if types == "-" else tuple(types.split(","))
        flags = flags[0] if flags else ""
        node.open = flags.split(" ")[0] == "open"
        if "enum=" in flags:
            node.enum = json.loads(flags.split("enum=", 1)[1])
    return header, root


JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))


def json_type(value):
    """The JSON schema type of a YAML value (bool before int: True is an int in Python)."""
    if value is None:
        return "null"
    return next((name for kind, name in JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def problems(values, node, path=""):
    """Every key of `values` that the chart does not document, or whose value the schema does not allow."""
    found = []
    for key, value in values.items():
        where = f"{path}.{key}" if path else str(key)
        child = node.keys.get(key)
        if child is None:
            child = next((sub for regex, sub in node.patterns.items() if re.search(regex, str(key))), None)
        if child is None:
            found.append(f"{where}: not a key the chart documents")
            continue
        kind = json_type(value)
        if child.types and kind not in child.types and not (kind == "integer" and "number" in child.types):
            found.append(f"{where}: a {kind}, where the chart takes {' or '.join(child.types)}")
        if child.enum is not None and value not in child.enum:
            found.append(f"{where}: {value!r} is none of {child.enum}")
        if not child.open and isinstance(value, dict):
            found += problems(value, child, where)
    return found


def test_the_key_list_says_where_it_comes_from():
    header, root = load_chart_keys()
    assert re.fullmatch(r"\d+\.\d+\.\d+", header.get("tag", "")), header
    assert re.fullmatch(r"[0-9a-f]{40}", header.get("commit", "")), header
    assert re.fullmatch(r"\d+\.\d+\.\d+", header.get("appVersion", "")), header
    assert "zero-to-jupyterhub-k8s" in KEYS.read_text(encoding="utf-8").split("\n", 3)[2]
    assert len(root.keys) >= 10 and {"hub", "singleuser", "cull", "custom", "prePuller"} <= set(root.keys)
    assert root.keys["hub"].keys["extraConfig"].open and root.keys["custom"].open
    assert root.keys["singleuser"].keys["cpu"].keys["limit"].types == ("number", "null")


def test_the_key_list_is_what_the_script_prints(tmp_path):
    """chart_keys.py on a small schema with every construct the chart's uses (a key only an if's `then`
    documents gets no type); and, given the chart's own schema (SEQCOURSE_Z2JH_SCHEMA=path/to/values.schema.yaml,
    from `git show TAG:jupyterhub/values.schema.yaml`), exactly the vendored list, which the chart's own
    default values (SEQCOURSE_Z2JH_VALUES=path/to/values.yaml) pass."""
    schema = {
        "type": "object", "additionalProperties": False,
        "properties": {
            "a": {"type": "object", "additionalProperties": False, "properties": {
                "n": {"type": ["number", "null"]},
                "free": {"type": "object", "additionalProperties": True},
                "files": {"type": "object", "additionalProperties": False,
                          "patternProperties": {".*": {"type": "object", "properties": {"mode": {"type": "number"}}}}},
                "kind": {"enum": ["x", "y"]},
            }},
            "s": {"type": "object", "required": ["create"], "if": {"properties": {"create": {"const": True}}},
                  "then": {"additionalProperties": False, "properties": {"create": {"type": "boolean"}}}},
            "list": {"type": "array"},
            "anything": {"type": "object"},
        },
    }
    path = tmp_path / "schema.yaml"
    path.write_text(yaml.safe_dump(schema, sort_keys=False))
    out = _run_script([str(path)])
    assert out.splitlines() == [
        "a\tobject", "a.n\tnumber,null", "a.free\tobject\topen", "a.files\tobject", "a.files.<.*>\tobject",
        "a.files.<.*>.mode\tnumber", 'a.kind\t-\tenum=["x", "y"]', "s\tobject", "s.create\t-", "list\tarray",
        "anything\tobject\topen"]
    schema_file = os.environ.get("SEQCOURSE_Z2JH_SCHEMA")
    if schema_file:
        header, _ = load_chart_keys()
        again = _run_script([schema_file, "--tag", header["tag"], "--commit", header["commit"], "--app-version", header["appVersion"]])
        assert again == KEYS.read_text(encoding="utf-8")
    defaults = os.environ.get("SEQCOURSE_Z2JH_VALUES")
    if defaults:
        assert problems(yaml.safe_load(Path(defaults).read_text()), load_chart_keys()[1]) == []


def _run_script(args):
    import runpy

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        sys.argv = ["chart_keys.py", *args]
        runpy.run_path(str(DEPLOY / "chart_keys.py"), run_name="__main__")
    assert stop.value.code == 0
    return out.getvalue()


def test_every_value_is_a_documented_key_of_the_chart():
    _, root = load_chart_keys()
    assert problems(load_values(), root) == []


@pytest.mark.parametrize("edit, says", [
    (("singleuser", "cpu", "limt", 2), "singleuser.cpu.limt: not a key"),
    (("singleuser", "cpu", "limit", "2"), "singleuser.cpu.limit: a string"),
    (("cull", "enabled", "yes"), "cull.enabled: a string"),
    (("singleuser", "storage", "type", "nfs"), "'nfs' is none of"),
    (("hub", "config", "jupyterHub", {"x": 1}), "hub.config.jupyterHub: not a key"),
    (("hub", "extraConfg", {}), "hub.extraConfg: not a key"),
    (("singleuser", "extraFiles", "x", "stringdata", "y"), "singleuser.extraFiles.x.stringdata: not a key"),
    (("hub", "extraConfig", "any", {"name": "anything goes here"}), None),
    (("custom", "seqcourse", "whatever", [1]), None),
])
def test_the_key_check_catches_a_broken_value(edit, says):
    """The check above can fail: each edit of values.yaml that the chart would refuse is named."""
    _, root = load_chart_keys()
    values = load_values()
    *path, key, value = edit
    node = values
    for part in path:
        node = node.setdefault(part, {})
    node[key] = value
    found = problems(values, root)
    if says is None:
        assert found == []
    else:
        assert len(found) == 1 and says in found[0], found


# ------------------------------------------------------------------ the hook that picks each user's server


class FakeZ2jh(ModuleType):
    """The chart's z2jh module, reading the values as the hub would (without the chart's defaults)."""

    def __init__(self, values):
        super().__init__("z2jh")
        self.values = values

    def get_config(self, key, default=None):
        node = self.values
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node


def run_extra_config(values, monkeypatch):
    """Exec every hub.extraConfig entry, in key order, as the chart does; their namespace and `c`."""
    from traitlets.config import Config

    monkeypatch.setitem(sys.modules, "z2jh", FakeZ2jh(values))
    namespace = {"c": Config(), "__name__": "jupyterhub_config"}
    for key, source in sorted(values["hub"]["extraConfig"].items()):
        exec(compile(source, f"hub.extraConfig.{key}", "exec"), namespace)
    return namespace


def test_every_extra_config_snippet_compiles():
    for key, source in load_values()["hub"]["extraConfig"].items():
        compile(source, f"hub.extraConfig.{key}", "exec")


@pytest.fixture
def hub(monkeypatch):
    """A JupyterHub database (in memory) with a class, and a way to start a spawner for any of its users."""
    pytest.importorskip("jupyterhub")
    from jupyterhub import orm
    from jupyterhub.spawner import Spawner
    from jupyterhub.user import User
    from traitlets import Bool, Callable, Dict, Integer, List, Unicode, Union

    class KubeSpawner(Spawner):
        """JupyterHub's Spawner with the traits the hook sets that KubeSpawner 7.0.0 (the chart's) adds,
        declared as kubespawner/spawner.py declares them; setting anything else is an error below."""
        image = Unicode("quay.io/jupyterhub/singleuser:latest")
        uid = Union([Integer(), Callable()], default_value=None, allow_none=True)
        gid = Union([Integer(), Callable()], default_value=None, allow_none=True)
        fs_gid = Union([Integer(), Callable()], default_value=None, allow_none=True)
        privileged = Bool(False)
        allow_privilege_escalation = Bool(False, allow_none=True)
        volumes = Union([List(), Dict()])
        volume_mounts = Union([List(), Dict()])
        working_dir = Unicode(None, allow_none=True)

        async def start(self):
            raise NotImplementedError

        async def stop(self, now=False):
            raise NotImplementedError

        async def poll(self):
            raise NotImplementedError

    db = orm.new_session_factory("sqlite:///:memory:")()
    groups = {name: orm.Group(name=name) for name in (STUDENTS, INSTRUCTORS, "staff")}
    members = {"ada": [STUDENTS], "alan": [STUDENTS], "grace": [INSTRUCTORS], "both": [STUDENTS, INSTRUCTORS],
               "eve": ["staff"], "nobody": [], "mary@uni.edu": [STUDENTS]}
    users = {}
    for name, in_groups in members.items():
        users[name] = orm.User(name=name)
        db.add(users[name])
        for group in in_groups:
            groups[group].users.append(users[name])
    db.add_all(groups.values())
    db.commit()

    class Hub:
        values = load_values()

        def spawn(self, name, values=None, volumes_as_list=False):
            namespace = run_extra_config(values or self.values, monkeypatch)
            hook = namespace["c"].Spawner.pre_spawn_hook
            exchange = {"name": "seqcourse-exchange", "persistentVolumeClaim": {"claimName": "seqcourse-exchange"}}
            spawner = KubeSpawner(user=User(users[name], db=db), environment={"FROM_CHART": "1"},
                                  volumes=[exchange] if volumes_as_list else {"seqcourse-exchange": exchange},
                                  volume_mounts=[] if volumes_as_list else {}, uid=1000, fs_gid=100)
            hook(spawner)
            strays = {name for name in vars(spawner) if not name.startswith("_")}  # traits live in _trait_values
            assert not strays, f"the hook set what KubeSpawner has no trait for: {strays}"
            return spawner

        def uid_of(self, name):
            return self.values["custom"]["seqcourse"]["students"]["uidBase"] + users[name].id

    return Hub()


def test_a_student_gets_the_students_image_and_a_uid_of_their_own(hub):
    course = hub.values["custom"]["seqcourse"]
    ada, alan = hub.spawn("ada"), hub.spawn("alan")
    image = hub.values["singleuser"]["image"]
    assert ada.image == f"{image['name']}:{image['tag']}"
    assert ada.environment["JUPYTER_CONFIG_PATH"] == course["studentConfigPath"]
    assert ada.environment["FROM_CHART"] == "1" and ada.environment["USER"] == "ada"
    assert "SEQCOURSE_PASSWD" not in ada.environment
    assert ada.uid == ada.gid == ada.fs_gid == hub.uid_of("ada")
    assert alan.uid == hub.uid_of("alan") != ada.uid
    assert ada.uid > course["instructor"]["uid"] and ada.uid >= course["students"]["uidBase"]
    assert not ada.privileged and ada.allow_privilege_escalation is False
    assert set(ada.volumes) == {"seqcourse-exchange"} and ada.volume_mounts == {}
    assert ada.mem_limit is None  # the chart's singleuser.memory applies


def test_an_instructor_gets_the_repository_image_the_course_folder_and_the_students_names(hub):
    course = hub.values["custom"]["seqcourse"]
    instructor = course["instructor"]
    for volumes_as_list in (False, True):
        grace = hub.spawn("grace", volumes_as_list=volumes_as_list)
        assert grace.image == f"{instructor['image']['name']}:{instructor['image']['tag']}"
        assert grace.environment["JUPYTER_CONFIG_PATH"] == instructor["configPath"]
        assert grace.uid == instructor["uid"] and grace.gid == grace.fs_gid == instructor["gid"]
        assert grace.notebook_dir == grace.working_dir == instructor["courseMountPath"]
        assert grace.cpu_limit == instructor["cpu"]["limit"] and grace.cpu_guarantee == instructor["cpu"]["guarantee"]
        assert grace.mem_limit == int(instructor["memory"]["limit"].rstrip("G")) * 2 ** 30
        assert grace.privileged is bool(instructor["privileged"])
        course_volume = {"name": "seqcourse-course", "persistentVolumeClaim": {"claimName": instructor["courseClaim"]}}
        mount = {"name": "seqcourse-course", "mountPath": instructor["courseMountPath"]}
        if volumes_as_list:
            assert grace.volumes[1:] == [course_volume] and grace.volume_mounts == [mount]
        else:
            assert grace.volumes["seqcourse-course"] == course_volume and grace.volume_mounts == {"seqcourse-course": mount}
    # nbgrader collect names a submission by its owner's uid: the same uid each student's server runs as
    passwd = [line.split(":") for line in grace.environment["SEQCOURSE_PASSWD"].splitlines()]
    assert {name: int(uid) for name, _, uid, *_ in passwd} == {n: hub.uid_of(n) for n in ("ada", "alan", "both")}
    assert all(len(fields) == 7 for fields in passwd)
    assert hub.spawn("ada").uid == hub.uid_of("ada")


def test_someone_in_both_groups_is_an_instructor_and_no_one_else_gets_a_server(hub):
    assert hub.spawn("both").environment["SEQCOURSE_ROLE"] == "instructor"
    for name in ("eve", "nobody"):
        with pytest.raises(PermissionError, match=f"neither {STUDENTS} nor {INSTRUCTORS}"):
            hub.spawn(name)
    with pytest.raises(PermissionError, match="cannot be a student id"):
        hub.spawn("mary@uni.edu")


def test_the_roster_fixes_a_students_uid_and_a_bad_roster_stops_the_hub(hub):
    values = load_values()
    students = values["custom"]["seqcourse"]["students"]
    students["uids"] = {"ada": 5001}
    assert hub.spawn("ada", values=values).uid == 5001
    assert hub.spawn("alan", values=values).uid == hub.uid_of("alan")
    for bad in ({"ada": 5001, "alan": 5001}, {"ada": students["uidBase"] + 1}, {"ada": 1000}, {"ada": 0}):
        students["uids"] = bad
        with pytest.raises(ValueError, match="custom.seqcourse.students.uids"):
            hub.spawn("ada", values=values)


def test_the_hook_notices_values_that_break_it(hub):
    """Can fail: a group name in values.yaml that the course does not use leaves its instructors without a server."""
    values = load_values()
    values["custom"]["seqcourse"]["instructorGroup"] = "formgrade-other"
    with pytest.raises(PermissionError):
        hub.spawn("grace", values=values)
    values = load_values()
    values["singleuser"]["image"]["tag"] = "2099.9"
    assert hub.spawn("ada", values=values).image.endswith(":2099.9")


# ------------------------------------------------------------------ groups, course id, exchange, users


def test_the_groups_and_the_course_id_are_the_courses():
    values = load_values()
    course = values["custom"]["seqcourse"]
    assert (course["courseId"], course["studentGroup"], course["instructorGroup"]) == (COURSE_ID, STUDENTS, INSTRUCTORS)
    assert set(values["hub"]["config"]["JupyterHub"]["load_groups"]) == {STUDENTS, INSTRUCTORS}
    # nbgrader's own reading of a JupyterHub group name
    from nbgrader.auth import jupyterhub as nbgrader_hub

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nbgrader_hub, "_query_jupyterhub_api", lambda method, path, post_data=None: {"groups": [STUDENTS, INSTRUCTORS]})
        assert nbgrader_hub.JupyterHubAuthPlugin().get_student_courses("ada") == [COURSE_ID]
    # the same names wherever else the repository speaks of the course's groups ({COURSE} templates aside)
    try:
        from autograder.hub import classroom
    except ImportError:
        classroom = None
    if classroom is not None:
        assert (classroom.COURSE, classroom.STUDENTS, classroom.INSTRUCTORS) == (COURSE_ID, STUDENTS, INSTRUCTORS)
    named = re.compile(r"\b(nbgrader|formgrade)-([A-Za-z0-9_][A-Za-z0-9_.-]*)(?![{A-Za-z0-9_])")
    skip = {".git", ".venv", "site", "test-artifacts", ".autograder", "node_modules", "__pycache__", "build"}
    elsewhere = set()
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in skip]
        for file in files:
            path = Path(folder, file)
            if (path.suffix not in {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".txt", ".sh", ".cfg"} and file != "Makefile") \
                    or path == Path(__file__).resolve():
                continue
            for m in named.finditer(path.read_text(encoding="utf-8", errors="replace")):
                elsewhere.add((m.group(1), m.group(2).rstrip("."), path.relative_to(ROOT).as_posix()))
    assert {suffix for _, suffix, _ in elsewhere} <= {COURSE_ID}, sorted(elsewhere)


def test_the_exchange_is_one_shared_volume_at_the_courses_exchange_root():
    from traitlets.config import Config

    values = load_values()
    storage = values["singleuser"]["storage"]
    (volume,) = storage["extraVolumes"].values()
    (mount,) = storage["extraVolumeMounts"].values()
    assert mount["name"] == volume["name"]
    c = Config()
    exec(values["singleuser"]["extraFiles"]["nbgrader_config"]["stringData"], {"get_config": lambda: c, "c": c})
    assert c.Exchange.root == mount["mountPath"] == "/srv/nbgrader/exchange"
    assert c.CourseDirectory.course_id == COURSE_ID
    manifests = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all((DEPLOY / "volumes.yaml").read_text())}
    claim = manifests[("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    # an in-tree NFS volume: the kubelet never changes its owners or modes (fsGroup), which the exchange relies on
    assert "nfs" in manifests[("PersistentVolume", claim["spec"]["volumeName"])]["spec"]
    assert ("PersistentVolumeClaim", values["custom"]["seqcourse"]["instructor"]["courseClaim"]) in manifests


def test_only_names_the_grader_takes_as_student_ids_may_log_in():
    pytest.importorskip("jupyterhub")
    from jupyterhub.auth import Authenticator

    config = load_values()["hub"]["config"]
    authenticator = Authenticator(username_pattern=config["Authenticator"]["username_pattern"])
    for name in ["ada", "a.b-c_d", "A" * 64, "A" * 65, ".ada", "-ada", "_ada", "ada@uni.edu", "[a]da", "a da",
                 "ada\n", "élise", "x/y", "..", "<b>", "9"]:
        assert authenticator.validate_username(name) == ids.valid(name), name
    # nobody logs in until the institution picks an authenticator; the name resolves to JupyterHub's
    chosen = config["JupyterHub"]["authenticator_class"]
    assert chosen == "null" and chosen in {e.name for e in importlib.metadata.entry_points(group="jupyterhub.authenticators")}
    assert config["JupyterHub"]["admin_access"] is False


def test_instructors_roles_name_real_scopes_and_the_courses_groups():
    pytest.importorskip("jupyterhub")
    from jupyterhub import scopes

    roles = load_values()["hub"]["loadRoles"]
    for role in roles.values():
        scopes._check_scopes_exist(role["scopes"])
        assert role["groups"] == [INSTRUCTORS]
        assert all(s.endswith(f"!group={STUDENTS}") for s in role["scopes"])
        assert not any(s.startswith(("access:servers", "admin", "servers")) for s in role["scopes"])


def test_resources_and_culler():
    values = load_values()
    su, instructor = values["singleuser"], values["custom"]["seqcourse"]["instructor"]

    def gib(size):  # KubeSpawner's byte specification: a number of bytes, or one with K, M, G or T (powers of 1024)
        number, unit = re.fullmatch(r"([\d.]+)([KMGT]?)", str(size)).groups()
        return float(number) * 1024 ** ("KMGT".index(unit) + 1 if unit else 0) / 1024 ** 3

    for resources in (su, instructor):
        assert 0 < resources["cpu"]["guarantee"] <= resources["cpu"]["limit"]
        assert 0 < gib(resources["memory"]["guarantee"]) <= gib(resources["memory"]["limit"])
    assert su["cpu"]["limit"] >= 2  # notebooks 08 and 10 train 1.5 to 1.7 times faster on two threads than on one
    sandbox_mb = int(re.search(r'limit\("sandbox_memory_mb", (\d+)\)', (ROOT / "nbgrader_config.py").read_text()).group(1))
    assert gib(instructor["memory"]["limit"]) >= GRADE_JOBS * sandbox_mb / 1024 + 2
    assert instructor["cpu"]["limit"] >= GRADE_JOBS
    assert values["cull"]["enabled"] is True and values["cull"]["users"] is False  # a uid comes from the user's id
    culling = su["extraFiles"]["kernel-culling"]["data"]["MappingKernelManager"]
    from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

    assert all(MappingKernelManager.class_own_traits().get(k) or MappingKernelManager.class_traits().get(k) for k in culling)


# ------------------------------------------------------------------ the images


def instructions(path):
    """A Dockerfile's instructions as [stage, INSTRUCTION, arguments], continuation lines joined."""
    out, stage, pending = [], -1, ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        if word.upper() == "FROM":
            stage += 1
        out.append((stage, word.upper(), rest.strip()))
        pending = ""
    return out


def copies(path):
    """(stage, --from or None, sources, destination) of every COPY."""
    found = []
    for stage, word, rest in instructions(path):
        if word == "COPY":
            args = shlex.split(rest)
            flags = [a for a in args if a.startswith("--")]
            args = [a for a in args if not a.startswith("--")]
            origin = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
            found.append((stage, origin, args[:-1], args[-1]))
    return found


def pip_installs(path):
    """The arguments of every `pip install`, one list each, in order."""
    found = []
    for _, word, rest in instructions(path):
        if word == "RUN":
            for command in re.split(r"&&|;", rest):
                args = shlex.split(command)
                if args[:2] == ["pip", "install"]:
                    found.append(args[2:])
    return found


def ignored(path, dockerfile):
    patterns = [p.strip() for p in Path(f"{dockerfile}.dockerignore").read_text().splitlines() if p.strip() and not p.startswith("#")]
    parts = Path(path).parts
    return any(fnmatch("/".join(parts[:i]), p) or fnmatch("/".join(parts[:i]), p.removeprefix("**/"))
               or (p.startswith("**/") and fnmatch(parts[i - 1], p[3:])) for p in patterns for i in range(1, len(parts) + 1))


DOCKERFILES = sorted(DEPLOY.glob("*.Dockerfile"))


def test_there_are_two_images():
    assert [p.name for p in DOCKERFILES] == ["instructor.Dockerfile", "student.Dockerfile"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.stem)
def test_an_image_copies_files_that_exist_and_pins_its_base(dockerfile):
    for _, origin, sources, _ in copies(dockerfile):
        if origin is None:
            for source in sources:
                assert source == "." or (ROOT / source).exists(), f"{dockerfile.name} copies {source}, which is not in the repository"
                assert source == "." or not ignored(source, dockerfile), f"{dockerfile.name}'s .dockerignore leaves out {source}"
    for student_work in ("submitted/ada/x.ipynb", "gradebook.db", "feedback", ".venv/bin/python", ".git/config", "grades.csv"):
        assert ignored(student_work, dockerfile), f"{dockerfile.name}'s build context would hold {student_work}"
    for needed in ("solutions/05_self_attention/05_self_attention.ipynb", "autograder/grading/exchange.py", "examples/submitted"):
        assert not ignored(needed, dockerfile)
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile.read_text(), re.M).group(1)
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-[a-z]+", base), f"unpinned base image {base}"
    minimum = re.search(r'requires-python = ">=(3\.\d+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert tuple(map(int, base.split(":")[1].split(".")[:2])) >= tuple(map(int, minimum.split(".")))
    assert all(rest in ("${PYTHON_IMAGE}", "${PYTHON_IMAGE} AS release") for _, word, rest in instructions(dockerfile) if word == "FROM")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.stem)
def test_an_image_installs_pinned_versions_of_what_exists(dockerfile):
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (ROOT / "constraints.txt").read_text(), re.M))
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    for args in pip_installs(dockerfile):
        assert "-c" in args and args[args.index("-c") + 1].endswith("constraints.txt"), args
        skip = {i + 1 for i, a in enumerate(args) if a in ("-c", "--index-url", "--extra-index-url")}
        for i, arg in enumerate(args):
            if i in skip or arg.startswith("-") or arg.startswith("$"):
                continue
            m = re.fullmatch(r"(\.|/[\w/.-]+)(?:\[([\w,]+)\])?", arg)
            if m:  # the repository (extras from pyproject.toml) or the student distribution
                if m.group(1) == "." and m.group(2):
                    assert set(m.group(2).split(",")) <= extras, arg
                continue
            assert arg in pins, f"{dockerfile.name} installs {arg}, which constraints.txt does not pin"
    chart_hub = load_chart_keys()[0]["appVersion"]
    assert pins["jupyterhub"].split(".")[0] == chart_hub.split(".")[0], "the servers' JupyterHub and the hub's differ in major version"


def test_the_student_image_is_the_student_distribution_and_nothing_else_of_the_repository():
    dockerfile = DEPLOY / "student.Dockerfile"
    steps = instructions(dockerfile)
    final = max(stage for stage, _, _ in steps)
    assert any(word == "RUN" and "python -m autograder release --student-dist /dist" in rest for s, word, rest in steps if s < final)
    from_context = {src for stage, origin, sources, _ in copies(dockerfile) if stage == final and origin is None for src in sources}
    assert from_context == {"constraints.txt", "jupyter-config/student", "deploy/kubernetes/entrypoint.sh"}
    assert [(origin, sources) for stage, origin, sources, _ in copies(dockerfile) if stage == final and origin] == [("release", ["/dist"])]
    final_installs = [args for args in pip_installs(dockerfile)[-2:]]
    assert "/opt/seqcourse/dist[check]" in final_installs[-1] and not any("-e" in a or "." in a for a in final_installs)
    # the `check` extra exists in what the distribution's pyproject.toml declares; the option is the release command's
    from autograder.release import student_dist

    assert "check" in tomllib.loads(student_dist.PYPROJECT.replace("{dependencies}", "[]"))["project"]["optional-dependencies"]
    assert "--student-dist" in _cli_help(["release", "--help"])
    config_path = load_values()["custom"]["seqcourse"]["studentConfigPath"]
    assert ("jupyter-config/student", config_path) in {(s[0], d) for stage, o, s, d in copies(dockerfile) if stage == final and not o}
    assert f"ENV JUPYTER_CONFIG_PATH={config_path}" in dockerfile.read_text()


def test_the_instructor_image_is_the_repository_with_grading_and_bubblewrap():
    dockerfile = DEPLOY / "instructor.Dockerfile"
    text = dockerfile.read_text()
    assert re.search(r'pip install [^\n]*-c constraints\.txt -e "\.\[grading,lab\]"', text)
    assert re.search(r"apt-get install [^&]*\bbubblewrap\b", text)
    instructor = load_values()["custom"]["seqcourse"]["instructor"]
    assert f"ENV JUPYTER_CONFIG_PATH={instructor['configPath']}" in text
    assert instructor["configPath"].startswith("/opt/seqcourse/") and "cp -R /srv/seqcourse /opt/seqcourse" in text
    assert (ROOT / instructor["configPath"].removeprefix("/opt/seqcourse/")).is_dir()
    assert "COPY . /srv/seqcourse" in text and instructor["courseMountPath"] == "/srv/seqcourse"
    assert "--jobs" in _cli_help(["grade", "--help"])


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.stem)
def test_both_images_start_through_the_entrypoint_that_names_uids(dockerfile):
    text = dockerfile.read_text()
    (entry,) = [d for _, o, s, d in copies(dockerfile) if s == ["deploy/kubernetes/entrypoint.sh"]]
    assert f'ENTRYPOINT ["{entry}"]' in text and 'CMD ["jupyterhub-singleuser"]' in text
    assert re.search(r"apt-get install [^&]*\blibnss-wrapper\b", text)


def _cli_help(argv):
    from autograder.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(argv)
    return out.getvalue()


ENTRYPOINT = DEPLOY / "entrypoint.sh"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux") or not shutil.which("stat"), reason="the entrypoint runs on Linux")


def run_entrypoint(command, env, tmp_path, listed=True):
    """Run entrypoint.sh with `command`; /etc/passwd is a copy that lists this process's uid, or not."""
    passwd = tmp_path / "passwd"
    own = f"me:x:{os.getuid()}:{os.getgid()}::/tmp:/bin/sh\n" if listed else ""
    passwd.write_text("root:x:0:0:root:/root:/bin/sh\n" * (os.getuid() != 0) + own)
    (tmp_path / "group").write_text("root:x:0:\n")
    env = {"PATH": os.environ["PATH"], "SEQCOURSE_ETC_PASSWD": str(passwd), "SEQCOURSE_ETC_GROUP": str(tmp_path / "group"), **env}
    done = subprocess.run([str(ENTRYPOINT), *command], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done, dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


@linux_only
def test_the_entrypoint_fills_the_instructors_course_folder_and_keeps_what_grading_wrote(tmp_path):
    image, course, exchange = tmp_path / "opt", tmp_path / "srv", tmp_path / "exchange"
    (image / "solutions").mkdir(parents=True)
    (image / "solutions" / "new.ipynb").write_text("new")
    (image / "nbgrader_config.py").write_text("code")
    (image / ".seqcourse-image").write_text("build 2")
    (course / "solutions").mkdir(parents=True)
    (course / "solutions" / "old.ipynb").write_text("old")
    (course / "submitted" / "ada").mkdir(parents=True)
    (course / "gradebook.db").write_text("grades")
    exchange.mkdir()
    os.chmod(exchange, 0o755)
    assert os.stat(ENTRYPOINT).st_mode & stat.S_IXUSR
    students = "ada:x:200001:200001::/home/jovyan:/usr/sbin/nologin\n"
    env = {"SEQCOURSE_IMAGE_COPY": str(image), "SEQCOURSE_COURSE": str(course), "SEQCOURSE_EXCHANGE": str(exchange),
           "USER": "grace", "SEQCOURSE_PASSWD": students}
    done, after = run_entrypoint(["env"], env, tmp_path)
    assert sorted(p.name for p in (course / "solutions").iterdir()) == ["new.ipynb"]
    assert (course / "nbgrader_config.py").read_text() == "code" and (course / ".seqcourse-image").read_text() == "build 2"
    assert (course / "gradebook.db").read_text() == "grades" and (course / "submitted" / "ada").is_dir()
    assert "is mode 755, not 1777" in done.stderr
    assert "SEQCOURSE_PASSWD" not in after
    if "NSS_WRAPPER_PASSWD" in after:  # the students' names, after the image's own (this uid is listed: no line for it)
        assert Path(after["NSS_WRAPPER_PASSWD"]).read_text().endswith(f"::/tmp:/bin/sh\n{students}")
    else:
        assert "libnss_wrapper is not installed" in done.stderr
    # the same image again: the folder is left as it is
    (course / "solutions" / "new.ipynb").write_text("edited")
    os.chmod(exchange, 0o1777)
    done, after = run_entrypoint(["env"], {**env, "SEQCOURSE_PASSWD": ""}, tmp_path)
    assert done.stderr == "" and "NSS_WRAPPER_PASSWD" not in after
    assert (course / "solutions" / "new.ipynb").read_text() == "edited"


@linux_only
def test_the_entrypoint_names_a_students_uid_after_the_student(tmp_path):
    env = {"SEQCOURSE_IMAGE_COPY": str(tmp_path / "none"), "SEQCOURSE_EXCHANGE": str(tmp_path / "none"), "USER": "ada"}
    done, after = run_entrypoint(["env"], env, tmp_path, listed=False)
    if "NSS_WRAPPER_PASSWD" not in after:
        assert "libnss_wrapper is not installed: nbgrader cannot name uid" in done.stderr
        return
    own = f"ada:x:{os.getuid()}:{os.getgid()}::"
    assert own in Path(after["NSS_WRAPPER_PASSWD"]).read_text()
    assert Path(after["NSS_WRAPPER_GROUP"]).read_text().endswith(f"ada:x:{os.getgid()}:\n") or os.getgid() == 0
    for hostile in ("ad:a", "a\nroot:x:0:0::/:/bin/sh", "-ada", ""):
        _, after = run_entrypoint(["env"], {**env, "USER": hostile}, tmp_path, listed=False)
        assert f"jovyan:x:{os.getuid()}:" in Path(after["NSS_WRAPPER_PASSWD"]).read_text()


NSS_WRAPPER = next(iter(sorted(Path("/usr/lib").glob("*/libnss_wrapper.so"))), None)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("setpriv") or NSS_WRAPPER is None,
                    reason="needs Linux, root (to run as the students' uids), setpriv and libnss_wrapper (apt-get install libnss-wrapper)")
def test_students_without_accounts_submit_and_the_instructors_server_collects_them_by_uid(hub):
    """The pods' arrangement on one machine: each process runs as the uid the hook gives that user's server,
    which no /etc/passwd lists, in the environment the hook sets, through the images' entrypoint; nbgrader's
    own release_assignment, fetch, submit and the course's collect, on one exchange. A classmate who
    renames himself ada in his own server gets nothing collected under her name."""
    grace, ada, alan = hub.spawn("grace"), hub.spawn("ada"), hub.spawn("alan")
    listed = {int(line.split(":")[2]) for line in Path("/etc/passwd").read_text().splitlines() if line.count(":") >= 6}
    if {ada.uid, alan.uid} & listed:
        pytest.skip("this machine has accounts with the students' uids")
    with tempfile.TemporaryDirectory(prefix="seqcourse-pods-") as top:  # pytest's tmp_path is root's alone
        os.chmod(top, 0o755)
        pods(hub, Path(top), grace, ada, alan)


def pods(hub, tmp_path, grace, ada, alan):
    exchange, course = tmp_path / "exchange", tmp_path / "course"
    exchange.mkdir()
    os.chmod(exchange, 0o1777)
    (course / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    name = "05_self_attention"
    shutil.copytree(ROOT / "notebooks" / name, course / "notebooks" / name)
    homes = {}
    for spawner in (grace, ada, alan):
        homes[spawner.user.name] = tmp_path / spawner.user.name
        homes[spawner.user.name].mkdir()
    for path in [course, *course.rglob("*"), homes["grace"]]:
        os.chown(path, grace.uid, grace.gid)
    for spawner in (ada, alan):
        os.chown(homes[spawner.user.name], spawner.uid, spawner.gid)
    flags = [f"--Exchange.root={exchange}", f"--CourseDirectory.course_id={COURSE_ID}"]

    def server(spawner, *args, cwd=None, **env):
        """`python -m nbgrader ARGS` in the user's server: its uid, the hook's environment, the entrypoint.
        CAP_DAC_READ_SEARCH alone lets the interpreter start from a folder the uid may not enter."""
        keep = {k: v for k, v in spawner.environment.items() if k in ("USER", "LOGNAME", "SEQCOURSE_PASSWD")}
        environment = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "LANG": "C.UTF-8",
                       "HOME": str(homes[spawner.user.name]), "SEQCOURSE_EXCHANGE": str(exchange), **keep, **env}
        command = ["setpriv", f"--reuid={spawner.uid}", f"--regid={spawner.gid}", "--clear-groups",
                   "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
                   str(ENTRYPOINT), sys.executable, "-m", "nbgrader", *args, *flags]
        done = subprocess.run(command, cwd=cwd or homes[spawner.user.name], env=environment, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    server(grace, "release_assignment", name, cwd=course)
    for student in (ada, alan):
        server(student, "fetch_assignment", name)
    server(ada, "submit", name)
    server(alan, "submit", name, USER="ada", LOGNAME="ada")  # alan, renamed ada in his own server
    server(alan, "submit", name)
    owners = sorted((entry.name.split("+")[0], entry.stat().st_uid) for entry in (exchange / COURSE_ID / "inbound").iterdir())
    assert owners == [("ada", ada.uid), ("ada", alan.uid), ("alan", alan.uid)]
    said = server(grace, "collect", name, cwd=course)
    assert "claims to be 'ada''s submission, but the account 'alan' owns it" in said
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["ada", "alan"]
    for student in ("ada", "alan"):
        assert (course / "submitted" / student / name / f"{name}.ipynb").is_file()
