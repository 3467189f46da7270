# A worker pod of job {{ job_id }} on Kubernetes without an operator (see horovod.k8s.sh): sshd as the notebook user
# on port {{ ssh_port }}, accepting the job's key only; its address published in the job directory once sshd listens
# (and again whenever the launcher took it for lost);
# done when the launcher writes workers-done (or sshd dies: then the pod fails, and the workers Job makes another).
set -uo pipefail
job_dir={{ job_dir | q }}
own=$(mktemp -d)
ssh-keygen -q -t ed25519 -N '' -f "$own/host_key" || exit 1
install -m 0600 {{ authorized_keys | q }} "$own/authorized_keys" || exit 1
cat > "$own/sshd_config" <<CONFIG
Port {{ ssh_port }}
HostKey $own/host_key
AuthorizedKeysFile $own/authorized_keys
PidFile $own/sshd.pid
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitUserEnvironment no
X11Forwarding no
LogLevel ERROR
CONFIG
/usr/sbin/sshd -D -e -f "$own/sshd_config" &
sshd=$!
until timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/{{ ssh_port }}" 2>/dev/null; do
    kill -0 "$sshd" 2>/dev/null || { echo "sshd exited before it listened" >&2; exit 1; }
    sleep 0.3
done
mkdir -p "$job_dir/workers" || exit 1
{% include "horovod-k8s-serve.sh" %}
# Its address and its hostname: the launcher asks the hostname back over ssh, so that another pod given the same
# address later (this one lost with its node) is not taken for this one.
publish || exit 1
echo "worker $POD_NAME ($POD_IP): sshd on port {{ ssh_port }}, waiting for the launcher"
serve "$sshd"
