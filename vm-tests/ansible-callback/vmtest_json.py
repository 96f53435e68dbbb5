"""Stdout callback for the VM tests: the whole run as one JSON document at the end.

ansible-core has no JSON callback of its own any more (it moved to the ansible.posix
collection, which Debian ships only inside the 300 MB `ansible` package), so this is the part
of it the tests read: plays (one per `serial` batch) -> tasks (handlers too, in the order they
ran, with start and end times) -> each host's result; and the recap's per-host counters.
"""

import datetime
import json

from ansible.module_utils.common.json import AnsibleJSONEncoder
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: vmtest_json
    type: stdout
    short_description: one JSON document with every play, task and host result
    description: the VM tests read it (vm-tests/src/ansible.rs)
"""


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "vmtest_json"

    def __init__(self):
        super().__init__()
        self.plays = []

    def v2_playbook_on_play_start(self, play):
        self.plays.append({"play": {"name": play.get_name()}, "tasks": []})

    def v2_playbook_on_task_start(self, task, is_conditional):
        if not self.plays:
            self.plays.append({"play": {"name": ""}, "tasks": []})
        self.plays[-1]["tasks"].append(
            {"task": {"name": task.get_name(), "duration": {"start": _now(), "end": _now()}}, "hosts": {}}
        )

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def _record(self, result, **flags):
        if not self.plays or not self.plays[-1]["tasks"]:
            return
        task = self.plays[-1]["tasks"][-1]
        body = dict(result._result)
        body.update(flags)
        task["hosts"][result._host.get_name()] = body
        task["task"]["duration"]["end"] = _now()

    def v2_runner_on_ok(self, result, **kwargs):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False, **kwargs):
        self._record(result, failed=True, ignored=ignore_errors)

    def v2_runner_on_skipped(self, result, **kwargs):
        self._record(result, skipped=True)

    def v2_runner_on_unreachable(self, result, **kwargs):
        self._record(result, unreachable=True)

    def v2_playbook_on_stats(self, stats):
        summary = {host: stats.summarize(host) for host in sorted(stats.processed)}
        out = {"plays": self.plays, "stats": summary}
        self._display.display(json.dumps(out, cls=AnsibleJSONEncoder, sort_keys=True))
