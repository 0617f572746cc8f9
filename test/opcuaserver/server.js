// An OPC UA server of node-opcua (nobody on this project wrote it) that
// offers Basic256Sha256 with SignAndEncrypt only, for the OPC UA driver's
// secured-session test (runtime/driver/opcua, TestOPCUAConnectsWithSecurity).
//
// node server.js PORT DIR: its PKI (its own certificate, made at the first
// start, and the client certificates it accepts) lives under DIR. Every
// line it prints on stdout is JSON: {"listening": PORT, "namespace": N}
// once it serves, {"session": ..., "securityPolicy": ..., "securityMode": ...}
// for each session activated, and {"node": NAME, "value": TEXT} for each
// value written.
const path = require("path");
const { OPCUAServer } = require("node-opcua-server");
const { OPCUACertificateManager } = require("node-opcua-certificate-manager");
const { MessageSecurityMode, SecurityPolicy } = require("node-opcua-secure-channel");
const { DataType, VariantArrayType } = require("node-opcua-variant");

const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

(async () => {
  const port = parseInt(process.argv[2], 10);
  const dir = process.argv[3];
  if (!(port > 0) || !dir) {
    throw new Error("usage: node server.js PORT DIR");
  }
  // The test's client certificate is self-signed and unknown: accepted, as
  // an operator would trust it, so the test needs no trust step.
  const serverCertificateManager = new OPCUACertificateManager({
    rootFolder: path.join(dir, "pki"),
    automaticallyAcceptUnknownCertificate: true,
  });
  await serverCertificateManager.initialize();
  const server = new OPCUAServer({
    port,
    hostname: "127.0.0.1",
    securityPolicies: [SecurityPolicy.Basic256Sha256],
    securityModes: [MessageSecurityMode.SignAndEncrypt],
    serverCertificateManager,
    allowAnonymous: true,
  });
  await server.initialize();
  const addressSpace = server.engine.addressSpace;
  const ns = addressSpace.getOwnNamespace();
  const variables = {
    Valve: [DataType.UInt16, 40],
    OwnerEpoch: [DataType.Int64, [0, 0]],
  };
  for (const [name, [dataType, value]] of Object.entries(variables)) {
    const v = ns.addVariable({
      organizedBy: addressSpace.rootFolder.objects,
      browseName: name,
      nodeId: "s=" + name,
      dataType,
      value: { dataType, arrayType: VariantArrayType.Scalar, value },
      accessLevel: "CurrentRead | CurrentWrite",
      userAccessLevel: "CurrentRead | CurrentWrite",
    });
    v.on("value_changed", (dv) => out({ node: name, value: String(dv.value.value) }));
  }
  server.on("session_activated", (session) => {
    const ch = session.channel;
    out({
      session: String(session.sessionName),
      securityPolicy: String(ch.securityPolicy),
      securityMode: MessageSecurityMode[ch.securityMode],
    });
  });
  await server.start();
  out({ listening: port, namespace: ns.index });
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
