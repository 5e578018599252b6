import OpenSSLKit
