"""References from an LLMDeployment to other objects in its namespace."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from llmfleet.models.base import ApiModel

# RFC 1123 subdomain, the rule for Secret and PersistentVolumeClaim names.
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"

# The rules Kubernetes sets for an object's name and for a Secret's or ConfigMap's key; a field
# gives only its own description.
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=OBJECT_NAME_PATTERN)]
DataKey = Annotated[str, Field(min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)]


class SecretKeyRef(ApiModel):
    """One key of a Secret in the LLMDeployment's namespace."""

    name: ObjectName = Field(
        description="Name of the Secret, in the same namespace as the LLMDeployment.",
    )
    key: DataKey = Field(
        description="Key within the Secret whose value is used.",
    )


class VolumeClaimRef(ApiModel):
    """A PersistentVolumeClaim in the LLMDeployment's namespace."""

    claim_name: ObjectName = Field(
        description=(
            "Name of an existing PersistentVolumeClaim, in the same namespace as the "
            "LLMDeployment. It must be ReadWriteMany (or ReadOnlyMany when pre-populated) "
            "for more than one replica to mount it."
        ),
    )
