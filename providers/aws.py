"""The `aws` provider: EC2 instances through boto3, as Determined's `type: aws` provider. The
image (`image_id`) must have Epochal installed; the instance's user data starts the agent with
the instance id as agent id. Instances carry the tags `epochal-pool: <pool>` and
`<tag_key>: <tag_value>`; only instances with both are listed or terminated.

The user data holds the cluster token (as Determined's holds its master's address): the agent
closes the metadata service to trials, so no trial reads it back. Credentials come from boto3's
usual chain (the master's instance profile, environment, config files).
"""

from __future__ import annotations

import shlex
from typing import Any

from providers import AgentSetup, ProviderError
from providers.config import AwsProvider
from wire.provisioning import Instance

POOL_TAG = "epochal-pool"
METADATA = "169.254.169.254"
WORK_DIR = "/var/lib/epochal/agent"
ID_PLACEHOLDER = "__EPOCHAL_INSTANCE_ID__"


def user_data(config: AwsProvider, setup: AgentSetup) -> str:
    argv = setup.argv(ID_PLACEHOLDER, WORK_DIR, ["--close-to-trials", f"{METADATA}:80"])
    command = " ".join(shlex.quote(a) for a in argv).replace(ID_PLACEHOLDER, '"$INSTANCE_ID"')
    return "\n".join([
        "#!/bin/bash",
        "set -euo pipefail",
        config.startup_script,
        f"IMDS_TOKEN=$(curl -sS -X PUT http://{METADATA}/latest/api/token "
        "-H 'X-aws-ec2-metadata-token-ttl-seconds: 300')",
        'INSTANCE_ID=$(curl -sS -H "X-aws-ec2-metadata-token: $IMDS_TOKEN" '
        f"http://{METADATA}/latest/meta-data/instance-id)",
        f"export EPOCHAL_CLUSTER_TOKEN={shlex.quote(setup.cluster_token)}",
        f"exec {config.agent_command} {command}",
        "",
    ])


class Ec2Agents:
    def __init__(self, config: AwsProvider, setup: AgentSetup, client: Any = None) -> None:
        self.config = config
        self.setup = setup
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import boto3  # type: ignore[import-untyped, import-not-found, unused-ignore]
            except ImportError:
                raise ProviderError("the aws provider needs boto3 (pip install 'epochal[aws]')"
                                    ) from None
            self._client = boto3.client("ec2", region_name=self.config.region)
        return self._client

    def _fail(self, doing: str, err: Exception) -> ProviderError:
        return ProviderError(f"pool {self.setup.pool}: {doing} in {self.config.region} failed: "
                             f"{err}")

    def launch(self, count: int) -> list[Instance]:
        c = self.config
        tags = [{"Key": POOL_TAG, "Value": self.setup.pool},
                {"Key": c.tag_key, "Value": c.tag_value},
                {"Key": "Name", "Value": c.instance_name}]
        request: dict[str, Any] = {
            "ImageId": c.image_id, "InstanceType": c.instance_type,
            "MinCount": count, "MaxCount": count, "UserData": user_data(c, self.setup),
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
            "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {
                "VolumeSize": c.root_volume_size, "VolumeType": "gp3",
                "DeleteOnTermination": True}}],
            "InstanceInitiatedShutdownBehavior": "terminate",
        }
        if c.ssh_key_name:
            request["KeyName"] = c.ssh_key_name
        if c.iam_instance_profile_arn:
            request["IamInstanceProfile"] = {"Arn": c.iam_instance_profile_arn}
        network = c.network_interface
        if network.subnet_id or network.security_group_id:
            interface: dict[str, Any] = {"DeviceIndex": 0,
                                         "AssociatePublicIpAddress": network.public_ip}
            if network.subnet_id:
                interface["SubnetId"] = network.subnet_id
            if network.security_group_id:
                interface["Groups"] = [network.security_group_id]
            request["NetworkInterfaces"] = [interface]
        try:
            answer = self.client.run_instances(**request)
        except Exception as err:  # botocore's ClientError, NoCredentialsError, ...
            raise self._fail(f"starting {count} {c.instance_type} instance(s)", err) from None
        return [Instance(i["InstanceId"], i["InstanceId"], i["LaunchTime"].timestamp())
                for i in answer["Instances"]]

    def instances(self) -> list[Instance]:
        filters = [{"Name": f"tag:{POOL_TAG}", "Values": [self.setup.pool]},
                   {"Name": f"tag:{self.config.tag_key}", "Values": [self.config.tag_value]},
                   {"Name": "instance-state-name", "Values": ["pending", "running"]}]
        found = []
        try:
            for page in self.client.get_paginator("describe_instances").paginate(
                    Filters=filters):
                for reservation in page["Reservations"]:
                    for i in reservation["Instances"]:
                        found.append(Instance(i["InstanceId"], i["InstanceId"],
                                              i["LaunchTime"].timestamp()))
        except Exception as err:
            raise self._fail("listing instances", err) from None
        return found

    def terminate(self, instance_ids: list[str]) -> None:
        ours = {i.instance_id for i in self.instances()}
        ids = [i for i in instance_ids if i in ours]
        if not ids:
            return
        try:
            self.client.terminate_instances(InstanceIds=ids)
        except Exception as err:
            raise self._fail(f"terminating {', '.join(ids)}", err) from None
