"""Offline lint of the deploy/ assets: Dockerfile, compose.yaml, prefect.yaml and the Kubernetes
manifests parse, agree with each other and with the repository (image tag = project version,
WORKDIR = the pull step's directory, one work pool name everywhere, entrypoints that name a flow
function of an existing file, the Dask workers' environment = pipeline.cluster.WORKER_ENVIRONMENT,
schedulers and APIs addressed at services that exist). Nothing is built, imported or started.
"""
from __future__ import annotations

import ast
import datetime as dt
import functools
import json
import re
import shlex
import tomllib
import zoneinfo
from pathlib import Path
from urllib.parse import urlsplit

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"

REQUIRED_SERVICES = {"postgres", "prefect-server", "dask-scheduler", "dask-worker", "jdl-serve", "prefect-worker"}
# Services that run jdl or Dask code: they need the jdl image, the shared data volume and JDL_HOME.
DATA_SERVICES = {"dask-scheduler", "dask-worker", "jdl-serve", "prefect-worker"}
DATA_MOUNT = "/data"


# ---------------------------------------------------------------------------------------------
# loading


def _yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def _load(path: Path):
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing"
    return yaml.safe_load(path.read_text())


@functools.cache
def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@functools.cache
def _compose() -> dict:
    return _load(DEPLOY / "compose.yaml")


@functools.cache
def _prefect() -> dict:
    return _load(DEPLOY / "prefect.yaml")


@functools.cache
def _k8s_docs() -> tuple[tuple[str, dict], ...]:
    files = sorted(K8S.glob("*.yaml"))
    assert files, "deploy/k8s/ has no manifests"
    return tuple((p.name, doc) for p in files for doc in yaml.safe_load_all(p.read_text()) if doc is not None)


def _k8s(kind: str) -> list[dict]:
    return [doc for _, doc in _k8s_docs() if doc.get("kind") == kind]


def _one_k8s(kind: str) -> dict:
    docs = _k8s(kind)
    assert len(docs) == 1, f"expected one {kind} in deploy/k8s/, found {len(docs)}"
    return docs[0]


@functools.cache
def _dockerfile() -> tuple[tuple[str, str], ...]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    path = DEPLOY / "Dockerfile"
    assert path.is_file(), "deploy/Dockerfile is missing"
    instructions, pending = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical = (pending + stripped).strip()
        pending = ""
        keyword, _, rest = logical.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    assert not pending, "deploy/Dockerfile ends inside a line continuation"
    return tuple(instructions)


def _docker(keyword: str) -> list[str]:
    return [rest for k, rest in _dockerfile() if k == keyword]


def _docker_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in _docker("ENV"):
        tokens = shlex.split(rest)
        if tokens and "=" not in tokens[0]:  # legacy form: ENV KEY value with spaces
            env[tokens[0]] = " ".join(tokens[1:])
            continue
        for token in tokens:
            key, sep, value = token.partition("=")
            assert sep, f"Dockerfile ENV: cannot parse {token!r}"
            env[key] = value
    return env


def _workdir() -> str:
    workdirs = _docker("WORKDIR")
    assert workdirs, "deploy/Dockerfile has no WORKDIR"
    return workdirs[-1]


@functools.cache
def _worker_environment() -> dict[str, str]:
    """pipeline.cluster.WORKER_ENVIRONMENT, read from the source (constants and arithmetic only)."""
    path = ROOT / "pipeline" / "cluster.py"
    assert path.is_file(), "pipeline/cluster.py is missing"
    operators = {ast.LShift: lambda a, b: a << b, ast.Mult: lambda a, b: a * b, ast.Add: lambda a, b: a + b,
                 ast.Pow: lambda a, b: a ** b, ast.Sub: lambda a, b: a - b}

    def evaluate(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in operators:
            return operators[type(node.op)](evaluate(node.left), evaluate(node.right))
        if isinstance(node, ast.Dict):
            return {evaluate(k): evaluate(v) for k, v in zip(node.keys, node.values)}
        raise AssertionError(f"pipeline/cluster.py: WORKER_ENVIRONMENT holds a non-constant ({ast.dump(node)})")

    for node in ast.parse(path.read_text()).body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == "WORKER_ENVIRONMENT" for t in targets):
            return {str(k): str(v) for k, v in evaluate(node.value).items()}
    raise AssertionError("pipeline/cluster.py defines no WORKER_ENVIRONMENT")


def _version() -> str:
    return _project()["project"]["version"]


def _image() -> str:
    return f"jdl:{_version()}"


# ---------------------------------------------------------------------------------------------
# small parsers


def _command(service: dict) -> list[str]:
    command = service.get("command")
    assert command, "service has no command"
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def _option(args: list[str], name: str, default: str | None = None) -> str | None:
    for k, arg in enumerate(args):
        if arg == name:
            assert k + 1 < len(args), f"{name} has no value in {args}"
            return args[k + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return default


def _compose_env(service: dict) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) if "=" in item else (item, "") for item in environment)
    return {str(k): "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in environment.items()}


def _effective_compose_env(service: dict) -> dict[str, str]:
    """The image's ENV overridden by the service's environment (for services of the jdl image)."""
    return {**_docker_env(), **_compose_env(service)}


_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _bytes(text, *, single_letter_binary: bool = False) -> float:
    """Bytes of "6GB" / "7Gi" / "7G" (decimal for k8s and Dask; binary for Docker's single letters)."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", str(text))
    assert match, f"not a memory size: {text!r}"
    unit = match.group(2).lower()
    assert unit in _UNITS, f"unknown memory unit in {text!r}"
    factor = _UNITS[unit]
    if single_letter_binary and len(unit) == 1 and unit != "b":
        factor = 2 ** (10 * "kmgt".index(unit) + 10)
    return float(match.group(1)) * factor


def _tcp_address(address: str) -> tuple[str, int]:
    parts = urlsplit(address)
    assert parts.scheme == "tcp" and parts.hostname and parts.port, f"not a tcp://HOST:PORT address: {address!r}"
    return parts.hostname, parts.port


_MONTHS = {m: k for k, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split(), start=1)}
_DAYS = {d: k for k, d in enumerate("SUN MON TUE WED THU FRI SAT".split())}
_CRON_FIELDS = [("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}),
                ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS)]
_CRON_ITEM = re.compile(r"(?:\*|([0-9]+|[A-Za-z]{3})(?:-([0-9]+|[A-Za-z]{3}))?)(?:/([0-9]+))?")


def cron_errors(expression: str) -> list[str]:
    """What is wrong with a 5-field cron expression (empty when valid); strict: no @macros, L, W, #, ?."""
    fields = str(expression).split()
    if len(fields) != 5:
        return [f"{expression!r}: {len(fields)} fields, expected 5 (minute hour day-of-month month day-of-week)"]
    errors = []
    for text, (name, low, high, names) in zip(fields, _CRON_FIELDS):
        for item in text.split(","):
            match = _CRON_ITEM.fullmatch(item)
            if not match:
                errors.append(f"{name} {item!r}: not *, N, N-M or one of them /STEP")
                continue
            start, end, step = match.groups()
            values = []
            for value in (start, end):
                if value is None:
                    continue
                number = int(value) if value.isdigit() else names.get(value.upper())
                if number is None or not low <= number <= high:
                    errors.append(f"{name} {value!r}: outside {low}-{high}")
                else:
                    values.append(number)
            if len(values) == 2 and values[0] > values[1]:
                errors.append(f"{name} {item!r}: range runs backwards")
            if step is not None and not 1 <= int(step) <= high:
                errors.append(f"{name} {item!r}: step outside 1-{high}")
    if not errors:
        try:  # a second opinion where a cron library is installed (prefect's dependency tree has cronsim)
            import cronsim
        except ImportError:
            pass
        else:
            try:
                next(cronsim.CronSim(expression, dt.datetime(2024, 1, 1)))
            except cronsim.CronSimError as error:
                errors.append(f"{expression!r}: {error}")
    return errors


# ---------------------------------------------------------------------------------------------
# every YAML file


def test_expected_assets_exist():
    for relative in ["Dockerfile", "compose.yaml", "prefect.yaml", "README.md", "k8s/namespace.yaml",
                     "k8s/dask-cluster.yaml", "k8s/prefect-worker.yaml", "k8s/pvc.yaml", "k8s/configmap.yaml"]:
        assert (DEPLOY / relative).is_file(), f"deploy/{relative} is missing"


@pytest.mark.parametrize("path", _yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path):
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    assert docs, f"{path.relative_to(ROOT)} is empty"
    assert all(isinstance(doc, dict) for doc in docs), f"{path.relative_to(ROOT)}: every document must be a mapping"


# ---------------------------------------------------------------------------------------------
# Dockerfile


def test_dockerfile_base_workdir_user_and_cmd():
    instructions = _dockerfile()
    assert instructions[0][0] == "FROM", "the Dockerfile must start with FROM"
    base = [token for token in instructions[0][1].split() if not token.startswith("--")][0]  # FROM [--flags] IMAGE [AS x]
    match = re.fullmatch(r"python:3\.(\d+)-slim(?:-\w+)?", base)
    assert match, f"base image {base!r}: expected python:3.X-slim"
    required = re.fullmatch(r">=\s*3\.(\d+)", _project()["project"]["requires-python"])
    assert required and int(match.group(1)) >= int(required.group(1)), \
        f"{base} does not satisfy requires-python {_project()['project']['requires-python']}"
    assert _workdir() == "/opt/jdl"
    users = _docker("USER")
    assert users, "the image must switch to a non-root user"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"USER {users[-1]} is root"
    keywords = [keyword for keyword, _ in instructions]
    last_run = max((k for k, keyword in enumerate(keywords) if keyword == "RUN"), default=-1)
    assert keywords.index("USER") > last_run, "USER must come after the last RUN (install as root, run as the user)"
    cmd = _docker("CMD")
    assert cmd and json.loads(cmd[-1]) == ["jdl", "--help"], f"CMD {cmd}: expected [\"jdl\", \"--help\"]"
    assert "jdl" in _project()["project"]["scripts"], "pyproject defines no `jdl` console script"


def test_dockerfile_installs_the_flows_extra():
    installs = [rest for rest in _docker("RUN") if re.search(r"\bpip3?\s+install\b", rest)]
    assert installs, "no RUN pip install in the Dockerfile"
    extras = set()
    for rest in installs:
        for group in re.findall(r"""['"]?\.\[([A-Za-z0-9_,\- ]+)\]['"]?""", rest):
            extras |= {e.strip() for e in group.split(",")}
    assert "flows" in extras, f"the Dockerfile must pip install '.[flows]' (extras found: {sorted(extras)})"
    optional = _project()["project"]["optional-dependencies"]
    assert extras <= set(optional), f"unknown extras {sorted(extras - set(optional))}"
    # The compose and k8s services run `dask scheduler` / `dask worker`: distributed must come in.
    installed = " ".join(" ".join(optional[e]) for e in extras)
    assert "pipeline" in extras or re.search(r"jdl\[[^\]]*pipeline", installed) or "distributed" in installed, \
        "the installed extras do not bring dask[distributed] (add the pipeline extra)"


def test_dockerfile_copies_existing_files_and_every_package():
    copied: set[str] = set()
    for rest in _docker("COPY"):
        tokens = [t for t in shlex.split(rest) if not t.startswith("--")]
        assert "--from" not in rest, "unexpected multi-stage COPY --from"
        assert len(tokens) >= 2, f"COPY {rest}: needs a source and a destination"
        for source in tokens[:-1]:
            assert not Path(source).is_absolute() and ".." not in Path(source).parts, f"COPY source {source!r}"
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository (the build context is its root)"
            copied.add(Path(source).as_posix().rstrip("/"))
    includes = _project()["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*").rstrip(".") for pattern in includes}
    needed = packages | {"pyproject.toml", _project()["project"]["readme"], "deploy"}
    assert needed <= copied, f"the Dockerfile does not COPY {sorted(needed - copied)}"


def test_dockerfile_environment():
    env = _docker_env()
    assert env.get("PREFECT_SERVER_ANALYTICS_ENABLED", "").lower() == "false"
    for key, value in _worker_environment().items():
        assert env.get(key) == value, f"Dockerfile ENV {key}={env.get(key)!r}, WORKER_ENVIRONMENT has {value!r}"


# ---------------------------------------------------------------------------------------------
# compose.yaml


def _services() -> dict[str, dict]:
    services = _compose().get("services")
    assert isinstance(services, dict) and services, "compose.yaml has no services"
    return services


def _scheduler_address() -> tuple[str, int]:
    """The compose service running `dask scheduler` and its port."""
    found = [(name, s) for name, s in _services().items()
             if s.get("command") and _command(s)[:2] == ["dask", "scheduler"]]
    assert len(found) == 1, f"expected one service running `dask scheduler`, found {[n for n, _ in found]}"
    name, service = found[0]
    return name, int(_option(_command(service), "--port", "8786"))


def test_compose_has_the_required_services():
    missing = REQUIRED_SERVICES - set(_services())
    assert not missing, f"compose.yaml lacks services {sorted(missing)}"


def test_compose_jdl_services_share_one_image_built_from_the_dockerfile():
    services = _services()
    jdl = {name: s for name, s in services.items() if "build" in s or str(s.get("image", "")).startswith("jdl:")}
    assert DATA_SERVICES <= set(jdl), f"services {sorted(DATA_SERVICES - set(jdl))} do not use the jdl image"
    images = {name: s.get("image") for name, s in jdl.items()}
    assert set(images.values()) == {_image()}, f"jdl services must all use {_image()} (= project version): {images}"
    builders = [s["build"] for s in jdl.values() if "build" in s]
    assert len(builders) == 1, f"exactly one service should build {_image()}, found {len(builders)}"
    build = builders[0]
    assert isinstance(build, dict), "build must be a mapping with context and dockerfile"
    context = (DEPLOY / build["context"]).resolve()
    assert context == ROOT, f"build context {build['context']!r} is {context}, not the repository root"
    assert (context / build["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve(), \
        f"build dockerfile {build['dockerfile']!r} is not deploy/Dockerfile"
    for name in REQUIRED_SERVICES - set(jdl):
        assert "image" in services[name] or "build" in services[name], f"service {name} has no image"


def test_compose_volumes_are_declared_and_data_is_shared():
    declared = set(_compose().get("volumes") or {})
    for name, service in _services().items():
        for volume in service.get("volumes") or []:
            source = volume.get("source") if isinstance(volume, dict) else str(volume).split(":")[0]
            if isinstance(volume, dict) and volume.get("type") not in (None, "volume"):
                continue
            if source and not source.startswith((".", "/", "~", "$")):
                assert source in declared, f"service {name}: volume {source!r} is not declared under volumes:"
    for name in DATA_SERVICES:
        service = _services()[name]
        mounts = {}
        for volume in service.get("volumes") or []:
            if isinstance(volume, dict):
                mounts[volume.get("target")] = volume.get("source")
            else:
                parts = str(volume).split(":")
                mounts[parts[1] if len(parts) > 1 else parts[0]] = parts[0]
        assert mounts.get(DATA_MOUNT) == "jdl-data", f"service {name} must mount the volume jdl-data at {DATA_MOUNT}"
        assert _effective_compose_env(service).get("JDL_HOME") == DATA_MOUNT, \
            f"service {name}: JDL_HOME != {DATA_MOUNT}"


def test_compose_depends_on_targets_exist():
    services = _services()
    for name, service in services.items():
        depends = service.get("depends_on") or []
        entries = depends.items() if isinstance(depends, dict) else ((d, {}) for d in depends)
        for target, options in entries:
            assert target in services, f"service {name} depends on unknown service {target!r}"
            assert target != name, f"service {name} depends on itself"
            if (options or {}).get("condition") == "service_healthy":
                assert "healthcheck" in services[target], \
                    f"service {name} waits for {target} to be healthy, but {target} has no healthcheck"


def test_compose_prefect_server_uses_postgres():
    services = _services()
    postgres, server = services["postgres"], services["prefect-server"]
    assert re.fullmatch(r"postgres:16(\..*)?", str(postgres.get("image"))), "postgres must be postgres:16"
    assert "healthcheck" in postgres, "postgres needs a healthcheck"
    command = _command(server)
    assert command[:3] == ["prefect", "server", "start"] and _option(command, "--host") == "0.0.0.0", command
    url = urlsplit(_compose_env(server).get("PREFECT_API_DATABASE_CONNECTION_URL", ""))
    assert url.scheme == "postgresql+asyncpg", "PREFECT_API_DATABASE_CONNECTION_URL must be postgresql+asyncpg://"
    pg_env = _compose_env(postgres)
    assert url.hostname == "postgres" and (url.port or 5432) == 5432
    assert (url.username, url.password, url.path.lstrip("/")) == \
        (pg_env.get("POSTGRES_USER"), pg_env.get("POSTGRES_PASSWORD"), pg_env.get("POSTGRES_DB")), \
        "the database URL does not match the postgres service's user/password/database"
    depends = server.get("depends_on")
    assert isinstance(depends, dict) and depends.get("postgres", {}).get("condition") == "service_healthy"
    for name, service in services.items():
        if service.get("image") == _image():
            assert _effective_compose_env(service).get("PREFECT_SERVER_ANALYTICS_ENABLED", "").lower() == "false", name


def test_compose_dask_workers_point_at_the_scheduler():
    host, port = _scheduler_address()
    scheduler_command = _command(_services()[host])
    assert _option(scheduler_command, "--host") == "0.0.0.0", "the scheduler must listen on 0.0.0.0"
    worker = _services()["dask-worker"]
    command = _command(worker)
    assert command[:2] == ["dask", "worker"], command
    addresses = [arg for arg in command[2:] if "://" in arg]
    assert len(addresses) == 1, f"dask worker needs one scheduler address: {command}"
    assert _tcp_address(addresses[0]) == (host, port), f"{addresses[0]} is not the scheduler service {host}:{port}"
    assert _option(command, "--nthreads") == "1"
    assert _option(command, "--nworkers", "1") == "1"
    limit = _option(command, "--memory-limit")
    assert limit and _bytes(limit) > 0, "dask workers need a --memory-limit"
    assert (worker.get("deploy") or {}).get("replicas") == 2, "dask-worker: deploy.replicas must be 2"
    cap = ((worker.get("deploy") or {}).get("resources") or {}).get("limits", {}).get("memory")
    if cap:
        assert _bytes(cap, single_letter_binary=True) >= _bytes(limit), \
            f"container memory limit {cap} is below the Dask memory limit {limit}"
    env = _effective_compose_env(worker)
    for key, value in _worker_environment().items():
        assert env.get(key) == value, f"dask-worker {key}={env.get(key)!r}, WORKER_ENVIRONMENT has {value!r}"


def test_compose_clients_reach_prefect_and_dask():
    host, port = _scheduler_address()
    server_port = int(_option(_command(_services()["prefect-server"]), "--port", "4200"))
    for name in ("jdl-serve", "prefect-worker"):
        env = _effective_compose_env(_services()[name])
        api = urlsplit(env.get("PREFECT_API_URL", ""))
        assert (api.scheme, api.hostname, api.port, api.path.rstrip("/")) == \
            ("http", "prefect-server", server_port, "/api"), f"{name}: PREFECT_API_URL {env.get('PREFECT_API_URL')!r}"
        assert _tcp_address(env.get("JDL_SCHEDULER", "")) == (host, port), f"{name}: JDL_SCHEDULER is not {host}:{port}"
    serve = _command(_services()["jdl-serve"])
    assert serve[:2] == ["jdl", "serve"], serve
    config = _option(serve, "--config", "deploy/prefect.yaml")
    assert config == "deploy/prefect.yaml" and (ROOT / config).is_file(), \
        f"jdl serve --config {config}: not deploy/prefect.yaml relative to the WORKDIR (= repo root)"
    assert _services()["jdl-serve"].get("working_dir", _workdir()) == _workdir()


def test_compose_prefect_worker_serves_the_deployments_pool():
    command = _command(_services()["prefect-worker"])
    assert command[:3] == ["prefect", "worker", "start"], command
    assert _option(command, "--type") == "process"
    assert _option(command, "--pool") in _pools(), f"--pool {_option(command, '--pool')} is not {_pools()}"


# ---------------------------------------------------------------------------------------------
# prefect.yaml


def _deployments() -> list[dict]:
    deployments = _prefect().get("deployments")
    assert isinstance(deployments, list) and deployments, "prefect.yaml has no deployments"
    return deployments


def _pools() -> set[str]:
    pools = {(d.get("work_pool") or {}).get("name") for d in _deployments()}
    assert None not in pools, "every deployment needs work_pool.name"
    assert len(pools) == 1, f"the deployments use several work pools {pools}; one worker serves one pool"
    return pools


@pytest.mark.parametrize("expression", ["0 2 * * *", "0 * * * *", "*/15 9-17 * * MON-FRI", "5,35 0 1 JAN,jul 0",
                                        "0 0 * * 7", "0-30/10 */2 1-15 */3 *"])
def test_cron_validator_accepts(expression):
    assert cron_errors(expression) == []


@pytest.mark.parametrize("expression", ["0 2 * *", "0 2 * * * *", "60 * * * *", "0 24 * * *", "0 0 0 * *",
                                        "0 0 * 13 *", "0 0 * * 8", "* * * * FOO", "@daily", "0 0 ? * *",
                                        "30-10 * * * *", "*/0 * * * *", "0 0 L * *", "1,,2 * * * *"])
def test_cron_validator_rejects(expression):
    assert cron_errors(expression), f"{expression!r} should be rejected"


def test_prefect_deployments_are_complete():
    names = [d.get("name") for d in _deployments()]
    assert all(names) and len(set(names)) == len(names), f"deployment names must be present and unique: {names}"
    for deployment in _deployments():
        name = deployment["name"]
        assert re.fullmatch(r"[^:\s]+\.py:[A-Za-z_]\w*", str(deployment.get("entrypoint", ""))), \
            f"{name}: entrypoint {deployment.get('entrypoint')!r} is not path/to/file.py:function"
        schedules = deployment.get("schedules")
        assert isinstance(schedules, list) and schedules, f"{name}: no schedules"
        for schedule in schedules:
            assert "cron" in schedule, f"{name}: schedule {schedule} has no cron"
            errors = cron_errors(schedule["cron"])
            assert not errors, f"{name}: " + "; ".join(errors)
            if schedule.get("timezone"):
                zoneinfo.ZoneInfo(schedule["timezone"])


def test_prefect_project_matches_the_image():
    steps = _prefect().get("pull") or []
    directories = [step["prefect.deployments.steps.set_working_directory"]["directory"]
                   for step in steps if "prefect.deployments.steps.set_working_directory" in step]
    assert directories == [_workdir()], f"pull step directories {directories} != Dockerfile WORKDIR {_workdir()}"
    pins = [re.fullmatch(r"prefect==([\w.]+)", dep.replace(" ", ""))
            for deps in _project()["project"]["optional-dependencies"].values() for dep in deps]
    pinned = {m.group(1) for m in pins if m}
    if pinned:
        assert str(_prefect().get("prefect-version")) in pinned, \
            f"prefect-version {_prefect().get('prefect-version')} != the pinned prefect {pinned}"


def test_prefect_work_pool_is_the_one_the_workers_serve():
    (pool,) = _pools()
    compose_pool = _option(_command(_services()["prefect-worker"]), "--pool")
    k8s_pool = _option(_k8s_prefect_worker_container()["command"] + _k8s_prefect_worker_container().get("args", []),
                       "--pool")
    assert compose_pool == pool, f"compose prefect-worker serves {compose_pool!r}, the deployments use {pool!r}"
    assert k8s_pool == pool, f"k8s prefect-worker serves {k8s_pool!r}, the deployments use {pool!r}"


def test_prefect_parameter_variables_are_set_where_flows_run():
    variables = set()
    for deployment in _deployments():
        text = json.dumps(deployment.get("parameters") or {})
        variables |= set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", text))
    assert variables, "expected ${JDL_HOME} in the path parameters"
    environments = {f"compose {name}": _effective_compose_env(_services()[name])
                    for name in ("jdl-serve", "prefect-worker")}
    environments["k8s prefect-worker"] = _k8s_env(_k8s_prefect_worker_container())
    for where, env in environments.items():
        missing = variables - set(env)
        assert not missing, f"{where} does not set {sorted(missing)} used by prefect.yaml parameters"


def _flow_functions(path: Path) -> dict[str, ast.FunctionDef]:
    def is_flow(decorator) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return (isinstance(target, ast.Name) and target.id == "flow") or \
            (isinstance(target, ast.Attribute) and target.attr == "flow")

    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(is_flow(d) for d in node.decorator_list)}


def _deployment_count() -> int:
    try:
        return max(1, len(yaml.safe_load((DEPLOY / "prefect.yaml").read_text()).get("deployments") or []))
    except Exception:  # reported by the other tests
        return 1


@pytest.mark.parametrize("index", range(_deployment_count()))
def test_prefect_entrypoint_is_a_flow_function(index):
    deployment = _deployments()[index]
    file, _, function = str(deployment.get("entrypoint", "")).partition(":")
    path = ROOT / file
    assert path.is_file(), (f"deployment {deployment.get('name')!r}: entrypoint file {file} does not exist yet "
                            f"(it is resolved relative to the WORKDIR {_workdir()} = the repository root)")
    flows = _flow_functions(path)
    assert function in flows, f"{file} defines no @flow function {function!r} (flows there: {sorted(flows)})"
    top = Path(file).parts[0]
    copied = {Path(t).as_posix().rstrip("/") for rest in _docker("COPY") for t in shlex.split(rest)[:-1]}
    assert top in copied, f"the Dockerfile does not COPY {top}/ into {_workdir()}, where the pull step loads {file}"
    arguments = flows[function].args
    accepted = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
    given = set(deployment.get("parameters") or {})
    if arguments.kwarg is None:
        assert given <= accepted, f"{deployment['name']}: {function} takes no parameters {sorted(given - accepted)}"
    positional = arguments.posonlyargs + arguments.args
    required = {a.arg for a in positional[:len(positional) - len(arguments.defaults)]}
    required |= {a.arg for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is None}
    assert required <= given, \
        f"{deployment['name']}: required parameters {sorted(required - given)} of {function} are not set"


# ---------------------------------------------------------------------------------------------
# Kubernetes


def _namespace() -> str:
    return _one_k8s("Namespace")["metadata"]["name"]


def _pod_specs() -> list[tuple[str, dict]]:
    specs = []
    for _, doc in _k8s_docs():
        if doc.get("kind") == "DaskCluster":
            specs += [(f"DaskCluster {role}", doc["spec"][role]["spec"]) for role in ("worker", "scheduler")]
        elif doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            specs.append((f"{doc['kind']} {doc['metadata']['name']}", doc["spec"]["template"]["spec"]))
    return specs


def _k8s_prefect_worker_container() -> dict:
    deployments = [d for d in _k8s("Deployment") if d["metadata"]["name"] == "prefect-worker"]
    assert len(deployments) == 1, "deploy/k8s/ needs one Deployment named prefect-worker"
    containers = deployments[0]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "the prefect-worker pod should run one container"
    container = dict(containers[0])
    container["command"] = [str(c) for c in container.get("command") or []]
    return container


def _k8s_env(container: dict) -> dict[str, str]:
    """The container's effective environment: image ENV, envFrom ConfigMaps, env (ConfigMap keys resolved)."""
    config_maps = {c["metadata"]["name"]: c.get("data") or {} for c in _k8s("ConfigMap")}
    env = dict(_docker_env())
    for source in container.get("envFrom") or []:
        name = (source.get("configMapRef") or {}).get("name")
        if name:
            assert name in config_maps, f"envFrom: ConfigMap {name!r} is not in deploy/k8s/"
            env.update({k: str(v) for k, v in config_maps[name].items()})
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "configMapKeyRef" in (item.get("valueFrom") or {}):
            ref = item["valueFrom"]["configMapKeyRef"]
            assert ref["name"] in config_maps, f"env {item['name']}: ConfigMap {ref['name']!r} is not in deploy/k8s/"
            assert ref["key"] in config_maps[ref["name"]], \
                f"env {item['name']}: ConfigMap {ref['name']} has no {ref['key']}"
            env[item["name"]] = str(config_maps[ref["name"]][ref["key"]])
    return env


def test_k8s_manifests_are_well_formed():
    namespace = _namespace()
    names = set()
    for file, doc in _k8s_docs():
        for key in ("apiVersion", "kind"):
            assert doc.get(key), f"{file}: a document has no {key}"
        name = (doc.get("metadata") or {}).get("name")
        assert name, f"{file}: {doc['kind']} has no metadata.name"
        assert (doc["kind"], name) not in names, f"{file}: duplicate {doc['kind']} {name}"
        names.add((doc["kind"], name))
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == namespace, \
                f"{file}: {doc['kind']} {name} is not in namespace {namespace!r}"
    for deployment in _k8s("Deployment"):
        selector = deployment["spec"]["selector"]["matchLabels"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), \
            f"Deployment {deployment['metadata']['name']}: the selector does not match the pod labels"


def test_k8s_images_and_volumes():
    claims = {c["metadata"]["name"]: c for c in _k8s("PersistentVolumeClaim")}
    assert "jdl-data" in claims, "deploy/k8s/ needs the PersistentVolumeClaim jdl-data"
    assert "ReadWriteMany" in claims["jdl-data"]["spec"]["accessModes"], "jdl-data is shared by pods: ReadWriteMany"
    specs = _pod_specs()
    assert specs, "no pod specs found in deploy/k8s/"
    for where, spec in specs:
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                assert claim in claims, f"{where}: claim {claim!r} is not in deploy/k8s/"
        for container in spec["containers"]:
            assert container.get("image") == _image(), f"{where}: image {container.get('image')!r} != {_image()}"
            for mount in container.get("volumeMounts") or []:
                assert mount["name"] in volumes, f"{where}: volumeMount {mount['name']!r} has no volume"
    data_pods = [where for where, _ in specs if where in ("DaskCluster worker", "Deployment prefect-worker")]
    assert len(data_pods) == 2
    for where, spec in specs:
        if where in data_pods:
            mounts = {m["mountPath"]: m["name"] for c in spec["containers"] for m in c.get("volumeMounts") or []}
            volume = {v["name"]: v for v in spec.get("volumes") or []}.get(mounts.get(DATA_MOUNT), {})
            assert (volume.get("persistentVolumeClaim") or {}).get("claimName") == "jdl-data", \
                f"{where}: {DATA_MOUNT} must be the jdl-data claim"
            for container in spec["containers"]:
                assert _k8s_env(container).get("JDL_HOME") == DATA_MOUNT, f"{where}: JDL_HOME != {DATA_MOUNT}"


def test_k8s_dask_cluster():
    cluster = _one_k8s("DaskCluster")
    assert cluster["apiVersion"] == "kubernetes.dask.org/v1"
    worker, scheduler = cluster["spec"]["worker"], cluster["spec"]["scheduler"]
    assert worker.get("replicas") == 2, "spec.worker.replicas must be 2"
    (worker_container,) = worker["spec"]["containers"]
    args = [str(a) for a in (worker_container.get("command") or []) + (worker_container.get("args") or [])]
    assert args[:2] == ["dask", "worker"], args
    assert _option(args, "--name") == "$(DASK_WORKER_NAME)", "workers are named by the operator's DASK_WORKER_NAME"
    assert _option(args, "--nthreads") == "1"
    limit = _option(args, "--memory-limit")
    assert limit, "dask workers need a --memory-limit"
    cap = ((worker_container.get("resources") or {}).get("limits") or {}).get("memory")
    assert cap and _bytes(cap) >= _bytes(limit), f"container memory limit {cap} is below the Dask memory limit {limit}"
    env = _k8s_env(worker_container)
    for key, value in _worker_environment().items():
        assert env.get(key) == value, f"DaskCluster worker {key}={env.get(key)!r}, WORKER_ENVIRONMENT has {value!r}"

    (scheduler_container,) = scheduler["spec"]["containers"]
    args = [str(a) for a in (scheduler_container.get("command") or []) + (scheduler_container.get("args") or [])]
    assert args[:2] == ["dask", "scheduler"], args
    port = int(_option(args, "--port", "8786"))
    container_ports = {p.get("name"): p["containerPort"] for p in scheduler_container.get("ports") or []}
    service = scheduler.get("service") or {}
    assert service.get("selector", {}).get("dask.org/cluster-name") == cluster["metadata"]["name"]
    assert service.get("selector", {}).get("dask.org/component") == "scheduler"
    comm = [p for p in service.get("ports") or [] if p.get("port") == 8786]
    assert comm, "the scheduler service must expose 8786"
    target = comm[0].get("targetPort", 8786)
    assert (container_ports.get(target) if isinstance(target, str) else target) == port == 8786, \
        f"service port 8786 targets {target!r}, the scheduler listens on {port}"
    assert any(p.get("port") == 8787 for p in service["ports"]), "the scheduler service should expose 8787 too"


def test_k8s_prefect_worker_reaches_the_dask_cluster_and_the_api():
    container = _k8s_prefect_worker_container()
    command = container["command"] + [str(a) for a in container.get("args") or []]
    assert command[:3] == ["prefect", "worker", "start"] and _option(command, "--type") == "process", command
    cluster = _one_k8s("DaskCluster")
    env = _k8s_env(container)
    expected = f"tcp://{cluster['metadata']['name']}-scheduler.{_namespace()}.svc.cluster.local:8786"
    assert env.get("JDL_SCHEDULER") == expected, f"JDL_SCHEDULER {env.get('JDL_SCHEDULER')!r} != {expected}"
    api = urlsplit(env.get("PREFECT_API_URL", ""))
    assert api.scheme in ("http", "https") and api.hostname and api.path.rstrip("/").endswith("/api"), \
        f"PREFECT_API_URL {env.get('PREFECT_API_URL')!r}"
    from_config_map = [e for e in container.get("env") or [] if e["name"] == "PREFECT_API_URL" and "valueFrom" in e]
    assert from_config_map or container.get("envFrom"), "PREFECT_API_URL should come from the ConfigMap"
    assert env.get("PREFECT_SERVER_ANALYTICS_ENABLED", "").lower() == "false"
    assert container.get("workingDir", _workdir()) == _workdir()
