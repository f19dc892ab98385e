#!/bin/sh
echo "pipelink's offline Bazel has no coverage tools (remote_coverage_tools is a stub)" >&2
exit 1
