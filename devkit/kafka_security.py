"""What a secured local Apache Kafka adds to a node's settings: TLS, SASL_SSL with SCRAM, ACLs.

A node of a :class:`~devkit.kafka_cluster.KafkaCluster` given a
:class:`BrokerSecurity` listens on three client ports:

- ``PLAINTEXT`` (loopback): the brokers' own traffic and the test harness,
  whose principal ``User:ANONYMOUS`` is a super user;
- ``SSL``: TLS with a client certificate required (the principal is the
  certificate's subject);
- ``SASL_SSL``: TLS and SCRAM-SHA-512 users (the principal is ``User:NAME``),
  and, with ``oauth_jwks_url``, OAUTHBEARER: JWTs from an OpenID Connect
  provider (:mod:`devkit.oidc` in the tests), checked against its key
  set; the principal is ``User:<the token's sub>``.

Authorization is Kafka's ``StandardAuthorizer`` with no access where no ACL
grants it; ``User:ADMIN`` (the SCRAM user made when the storage is formatted)
is a super user as well. Other SCRAM users are made through the admin API.
"""

from __future__ import annotations

from dataclasses import dataclass

from devkit.tls import CertificateSet

SCRAM_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class BrokerSecurity:
    """TLS material and the super user of a secured test cluster."""

    certificates: CertificateSet
    admin_user: str = "admin"
    admin_password: str = "admin-secret-3141"
    #: Where the brokers fetch the identity provider's JSON Web Key Set: OAUTHBEARER is enabled when given.
    oauth_jwks_url: str | None = None

    def listener_settings(self, plaintext: str, ssl: str, sasl_ssl: str, controller: str) -> dict[str, str]:
        """The node settings for listeners at these ``host:port`` addresses."""
        certificates = self.certificates
        client_listeners = f"PLAINTEXT://{plaintext},SSL://{ssl},SASL_SSL://{sasl_ssl}"
        return {
            "listeners": f"{client_listeners},CONTROLLER://{controller}",
            "advertised.listeners": client_listeners,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(certificates.broker_keystore),
            "ssl.keystore.password": certificates.password,
            "ssl.key.password": certificates.password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certificates.ca_pem),
            "listener.name.ssl.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": SCRAM_MECHANISM + (",OAUTHBEARER" if self.oauth_jwks_url else ""),
            f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            **self._oauth_settings(),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{self.admin_user};User:ANONYMOUS",
        }

    def _oauth_settings(self) -> dict[str, str]:
        if self.oauth_jwks_url is None:
            return {}
        oauth = "org.apache.kafka.common.security.oauthbearer"
        return {
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": f"{oauth}.OAuthBearerLoginModule required;",
            "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class": (
                f"{oauth}.OAuthBearerValidatorCallbackHandler"
            ),
            "sasl.oauthbearer.jwks.endpoint.url": self.oauth_jwks_url,
        }

    def jvm_properties(self) -> list[str]:
        """System properties of the broker JVM: Kafka fetches only the OAuth URLs it is allowed to."""
        if self.oauth_jwks_url is None:
            return []
        return [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.oauth_jwks_url}"]

    def format_arguments(self) -> list[str]:
        """``kafka-storage format`` arguments that create the super user's SCRAM credential."""
        return ["--add-scram", f"{SCRAM_MECHANISM}=[name={self.admin_user},password={self.admin_password}]"]
