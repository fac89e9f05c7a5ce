; Fireside for Windows: a per-user install (no administrator rights needed) with a
; Start-menu entry, an optional desktop icon and an uninstaller. It packs the bundle
; that packaging/build.py leaves in dist\fireside; the installers workflow runs
;   iscc /DAppVersion=0.1.0 packaging\windows\fireside.iss
; Conversations and settings in %LOCALAPPDATA%\Fireside are the user's: the
; uninstaller leaves them.

#ifndef AppVersion
  #define AppVersion "0.0.0"
#endif
#define Bundle "..\..\dist\fireside"

[Setup]
; The AppId ties upgrades and the uninstaller together: never change it.
AppId={{EBF50EFB-A0F4-47FB-B5FE-96F5AD91DD49}
AppName=Fireside
AppVersion={#AppVersion}
AppVerName=Fireside {#AppVersion}
AppPublisher=Fireside developers
DefaultDirName={autopf}\Fireside
DefaultGroupName=Fireside
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
SetupIconFile=..\..\build\fireside.ico
UninstallDisplayIcon={app}\Fireside.exe
UninstallDisplayName=Fireside
OutputDir=..\..\dist
OutputBaseFilename=Fireside-{#AppVersion}-setup
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
CloseApplications=yes
; Tells Explorer that the file types below changed.
ChangesAssociations=yes

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#Bundle}\*"; DestDir: "{app}"; Flags: recursesubdirs createallsubdirs ignoreversion

[Icons]
Name: "{autoprograms}\Fireside"; Filename: "{app}\Fireside.exe"; Comment: "Chat privately with local language models"
Name: "{autodesktop}\Fireside"; Filename: "{app}\Fireside.exe"; Tasks: desktopicon

[Registry]
; .gguf files get "Open with > Fireside" (Fireside.exe MODEL.gguf): offered, not taken
; over, since other apps open them too. Per user, like the install; the uninstaller
; removes them.
Root: HKA; Subkey: "Software\Classes\.gguf\OpenWithProgids"; ValueType: string; ValueName: "Fireside.gguf"; ValueData: ""; Flags: uninsdeletevalue
Root: HKA; Subkey: "Software\Classes\Fireside.gguf"; ValueType: string; ValueName: ""; ValueData: "GGUF language model"; Flags: uninsdeletekey
Root: HKA; Subkey: "Software\Classes\Fireside.gguf\DefaultIcon"; ValueType: string; ValueName: ""; ValueData: "{app}\Fireside.exe,0"
Root: HKA; Subkey: "Software\Classes\Fireside.gguf\shell\open\command"; ValueType: string; ValueName: ""; ValueData: """{app}\Fireside.exe"" ""%1"""
Root: HKA; Subkey: "Software\Classes\Applications\Fireside.exe\SupportedTypes"; ValueType: string; ValueName: ".gguf"; ValueData: ""; Flags: uninsdeletekey

[Run]
Filename: "{app}\Fireside.exe"; Description: "{cm:LaunchProgram,Fireside}"; Flags: nowait postinstall skipifsilent
