"""The hub of a class on this machine (`jupyterhub -f` this file; python -m autograder.hub starts it).

Its settings come from the environment that command sets: SEQCOURSE_HUB_STATE (the class's folder, see
classroom.py), SEQCOURSE_HUB_PORT, SEQCOURSE_HUB_CPU (CPUs per student), SEQCOURSE_HUB_MEM (memory per student),
SEQCOURSE_HUB_PIDS (processes per student), and the ports of the hub's API and the proxy's (SEQCOURSE_HUB_API_PORT,
SEQCOURSE_HUB_PROXY_PORT).

Each user's server has an origin of its own: the hub's pages are on http://localhost:PORT, a user's server on
http://NAME.localhost:PORT (browsers resolve every name under localhost to this machine). So a page a student's
server serves, whatever her configuration makes it serve, runs in her origin, not the hub's: it cannot read the
hub's pages or the instructor's (their xsrf tokens among them), and the cookies of the hub and of every other
server are not sent to it. A real class does the same on a domain of its own: subdomain_host =
"https://hub.example.edu", with a wildcard DNS record and certificate for *.hub.example.edu.

Each student's server listens in a network of its own (autograder/hub/relay.py), so the hub's public port, its API
port and the proxy's are out of her reach but for what her relay carries: the hub's API. What she sends the hub is
bounded before it is read, she makes no API token, and the hub's log on disk is rotated (autograder/hub/bounds.py).
"""
import os

from autograder.hub import bounds
from autograder.hub.proxy import CheckedProxy
from autograder.hub.classroom import HOST, INSTRUCTORS, STUDENTS, Classroom
from autograder.hub.spawner import TRIAL, ClassSpawner, TrialAuthenticator

c = get_config()  # noqa: F821 (provided by jupyterhub)
state = os.environ["SEQCOURSE_HUB_STATE"]
room = Classroom.load(state)

port = int(os.environ.get("SEQCOURSE_HUB_PORT", "8000"))
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = port
c.JupyterHub.subdomain_host = f"http://{HOST}:{port}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get("SEQCOURSE_HUB_API_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ.get('SEQCOURSE_HUB_PROXY_PORT', '8001')}"
c.JupyterHub.db_url = f"sqlite:///{room.hub_dir / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(room.hub_dir / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(room.hub_pid_file)
c.ConfigurableHTTPProxy.command = [str(room.proxy)]
c.ConfigurableHTTPProxy.pid_file = str(room.proxy_pid_file)
c.JupyterHub.proxy_class = CheckedProxy  # after every start of the proxy, it alone holds the hub's port, or the hub stops
c.JupyterHub.cleanup_servers = True  # Ctrl-C stops every user's server
c.JupyterHub.template_vars = {"announcement_login": TRIAL}
bounds.bound_requests()
c.JupyterHub.extra_log_handlers = [bounds.log_file(room.hub_dir / "hub.log")]
c.JupyterHub.load_roles = bounds.roles(room.instructor)
c.JupyterHub.token_expires_in_max_seconds = bounds.TOKEN_DAYS * 24 * 3600

c.JupyterHub.authenticator_class = TrialAuthenticator
c.TrialAuthenticator.state = state
c.Authenticator.allowed_users = set(room.users)
c.Authenticator.admin_users = set()  # an admin may open anyone's server, and so read their work: no one is

# nbgrader's JupyterHubAuthPlugin reads a user's courses from these groups (nbgrader-<course>, formgrade-<course>)
c.JupyterHub.load_groups = {STUDENTS: {"users": room.students}, INSTRUCTORS: {"users": [room.instructor]}}
# ... through the server's own token, which may read its owner's groups and nothing of anyone else's
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", "read:users:name!user",
                                 "read:users:groups!user"]

c.JupyterHub.spawner_class = ClassSpawner
c.ClassSpawner.state = state
c.Spawner.env_keep = ["LANG", "LC_ALL", "TZ"]  # not the hub's PATH or PYTHONPATH (spawner.ClassSpawner.get_env)
c.Spawner.cpu_limit = float(os.environ.get("SEQCOURSE_HUB_CPU", "1"))
c.Spawner.mem_limit = int(os.environ.get("SEQCOURSE_HUB_MEM", str(3 * 2**30)))  # bytes
c.ClassSpawner.pids_limit = int(os.environ.get("SEQCOURSE_HUB_PIDS", "512"))
c.Spawner.poll_interval = 10  # a server that ended by itself is noticed, and what it left ended, within seconds
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
