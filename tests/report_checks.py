"""What the bench report tests share: named checks that are counted, and running a bench script."""
import subprocess
import sys


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def expect(self, name, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + name + ("" if ok else f"\n     {detail}"))
        self.passed += bool(ok)
        self.failed += not ok

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def script_runner(script):
    """run(*args): the script under this Python with those arguments, its output captured."""
    return lambda *args: subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True)
