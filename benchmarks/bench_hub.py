"""A class under load: N students' servers on `make hub`'s JupyterHub, each training notebook 10's GPT at once.

    sudo python benchmarks/bench_hub.py --students 10 20          # each class size in turn (minutes each)
    sudo python benchmarks/bench_hub.py --students 30 --cpu 0.5   # another limit per server

For each class size: the hub (python -m autograder.hub, the class's own folder under --state, reused between
runs) starts N student servers, each under its CPU limit (--cpu) and memory limit; each server's kernel trains a
GPT of notebook 10's CPU size (2 layers, d_model 128, 4 heads, block 64, batches of 24, a vocabulary of 768, on
PyTorch's own modules: the students' distribution has no reference) for --seconds, all at once. Meanwhile a
person's clicks are timed, one after another: the hub's login (POST /hub/login), its home page, and a
student's JupyterLab page through the proxy, on its own origin. Run it from a checkout only root may read, as
`make hub` requires. Printed: the median and worst of each, and the students' training
steps per second (median, worst, sum), against one student training alone on the same machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import requests
import websocket

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from autograder.hub import client, proxy  # noqa: E402
from autograder.hub.classroom import Classroom  # noqa: E402

TRAIN = """
import time, torch, course_lib
from torch import nn
torch.manual_seed(0)
V, T, B, d = 768, 64, 24, 128
class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.pos = nn.Embedding(V, d), nn.Embedding(T, d)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks, self.head = nn.TransformerEncoder(layer, 2), nn.Linear(d, V)
    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(T)
        return self.head(self.blocks(self.emb(x) + self.pos.weight, mask=mask, is_causal=True))
model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(V, (100_000,))
steps, start = 0, time.perf_counter()
while time.perf_counter() - start < {seconds}:
    i = torch.randint(len(data) - T - 1, (B,))
    x = torch.stack([data[j:j + T] for j in i]); y = torch.stack([data[j + 1:j + T + 1] for j in i])
    loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    opt.zero_grad(); loss.backward(); opt.step(); steps += 1
print(json.dumps({{"steps": steps, "seconds": time.perf_counter() - start, "threads": torch.get_num_threads()}}))
"""


class Student:
    def __init__(self, url, room, name, port):
        self.url, self.name, self.s, self.server = url, name, client.session(), client.server_url(name, port)
        self.password = room.passwords[name]
        self.login()
        r = self.s.post(f"{url}/hub/api/users/{name}/tokens", json={"note": "bench"},
                        headers={"X-XSRFToken": self.s.cookies.get("_xsrf", path="/hub/")})
        r.raise_for_status()
        self.token = r.json()["token"]

    def login(self):
        s = client.session()
        s.get(f"{self.url}/hub/login")
        start = time.perf_counter()
        r = s.post(f"{self.url}/hub/login", data={"username": self.name, "password": self.password,
                                                  "_xsrf": s.cookies.get("_xsrf", path="/hub/")}, allow_redirects=False)
        took = time.perf_counter() - start
        assert r.status_code == 302, r.status_code
        self.s = s
        return took

    def auth(self):
        return {"Authorization": f"token {self.token}"}

    def start_server(self):
        self.s.post(f"{self.url}/hub/api/users/{self.name}/server", headers=self.auth())
        for _ in range(600):
            if self.s.get(f"{self.server}api/status", headers=self.auth()).status_code == 200:
                return
            time.sleep(0.5)
        raise RuntimeError(f"{self.name}'s server did not start")

    def run(self, code):
        """Run `code` in a new kernel of the student's server; its printed output."""
        r = self.s.post(f"{self.server}api/kernels", headers=self.auth(), json={"name": "python3"})
        r.raise_for_status()
        kernel = r.json()["id"]
        ws = websocket.create_connection(f"{self.server.replace('http', 'ws')}api/kernels/{kernel}/channels",
                                         header=[f"Authorization: token {self.token}"], timeout=3600)
        msg_id = uuid.uuid4().hex
        ws.send(json.dumps({"header": {"msg_id": msg_id, "username": self.name, "session": uuid.uuid4().hex,
                                       "msg_type": "execute_request", "version": "5.3"},
                            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                            "content": {"code": "import json\n" + code, "silent": False, "store_history": False,
                                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        out = []
        while True:
            msg = json.loads(ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "stream":
                out.append(msg["content"]["text"])
            elif kind == "error":
                out.append("\n".join(msg["content"]["traceback"]))
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                break
        ws.close()
        self.s.delete(f"{self.server}api/kernels/{kernel}", headers=self.auth())
        return "".join(out)


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def clicks(url, students, until, every=1.0):
    """A person's clicks until `until` (monotonic), a round every `every` seconds: login, hub home, a JupyterLab page."""
    times = {"login": [], "hub home": [], "JupyterLab page": []}
    i = 0
    while time.monotonic() < until:
        time.sleep(max(0.0, every - (time.monotonic() % every)))
        who = students[i % len(students)]
        times["login"].append(who.login())
        times["hub home"].append(timed(lambda: who.s.get(f"{url}/hub/home").raise_for_status()))
        times["JupyterLab page"].append(timed(lambda: who.s.get(f"{who.server}lab", headers=who.auth()).raise_for_status()))
        i += 1
    return times


def train_all(students, seconds):
    results = [None] * len(students)

    def one(k):
        out = students[k].run(TRAIN.format(seconds=seconds))
        try:
            results[k] = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            results[k] = {"error": out[-2000:]}
    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(students))]
    for t in threads:
        t.start()
    return threads, results


def class_size(args, n, solo):
    port = proxy.free_ports(1)[0]
    log = open(Path(args.state) / f"hub-{n}.log", "wb")
    hub = subprocess.Popen([sys.executable, "-m", "autograder.hub", "--students", str(n), "--state", args.state,
                            "--prefix", "bench-", "--home-base", str(Path(args.state) / "home"), "--port", str(port),
                            "--cpu", str(args.cpu), "--mem", args.mem], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://localhost:{port}"
    try:
        while True:
            try:
                if requests.get(f"{url}/hub/login", timeout=5).ok:
                    break
            except requests.ConnectionError:
                time.sleep(1)
            if hub.poll() is not None:
                sys.exit(f"the hub exited: see {log.name}")
        room = Classroom.load(args.state)
        students = [Student(url, room, name, port) for name in room.students[:n]]
        start = time.perf_counter()
        for s in students:
            s.start_server()
        spawn = time.perf_counter() - start
        threads, results = train_all(students, args.seconds)
        times = clicks(url, students, time.monotonic() + args.seconds)
        for t in threads:
            t.join()
        failed = [r for r in results if "error" in r]
        if failed:
            sys.exit(f"a student's training failed:\n{failed[0]['error']}")
        rates = [r["steps"] / r["seconds"] for r in results]
        print(f"\n{n} students ({args.cpu:g} CPU, {args.mem} each, {os.cpu_count()} CPUs in all): servers started in {spawn:.1f} s "
              f"({spawn / n:.2f} s each); PyTorch threads per kernel {sorted({r['threads'] for r in results})}")
        for what, ts in times.items():
            print(f"  {what:<16} median {statistics.median(ts) * 1000:7.0f} ms   worst {max(ts) * 1000:7.0f} ms   ({len(ts)} while training)")
        print(f"  training steps/s per student: median {statistics.median(rates):.2f}, worst {min(rates):.2f}, sum {sum(rates):.1f}"
              + (f"; one student alone: {solo:.2f}" if solo else ""), flush=True)
        peaks = [int(p.read_text()) / 2**20 for p in Path("/sys/fs/cgroup/memory").glob("seqcourse-hub-*/memory.max_usage_in_bytes")]
        if peaks:  # each student's server, its kernel and what it trained, at their highest
            print(f"  memory per student's server: median {statistics.median(peaks):.0f} MB, most {max(peaks):.0f} MB, "
                  f"all together {sum(peaks) / 1024:.1f} GB", flush=True)
        return statistics.median(rates)
    finally:
        hub.send_signal(2)
        hub.wait()
        log.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--students", type=int, nargs="+", default=[10, 20])
    p.add_argument("--cpu", type=float, default=1.0)
    p.add_argument("--mem", default="2G")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--state", default="/tmp/seqcourse-bench-hub")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("the hub makes Unix accounts and starts servers as them: run this as root")
    Path(args.state).mkdir(parents=True, exist_ok=True)
    os.chmod(args.state, 0o755)
    client.resolve_loopback()
    solo = class_size(args, 1, None)
    for n in args.students:
        class_size(args, n, solo)


if __name__ == "__main__":
    main()
